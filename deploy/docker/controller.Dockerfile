# syntax=docker/dockerfile:1
# droidwire controller image. Build from the repository root (the build context):
#
#   docker build -f deploy/docker/controller.Dockerfile -t droidwire/controller .
#
# Configuration is the controller's own environment (controller/config.py):
#   DROIDWIRE_DB               sqlite:///… or postgresql://USER:PASSWORD@HOST/DB
#   DROIDWIRE_REDIS            redis://HOST:6379/0 for cluster mode (several replicas)
#   DROIDWIRE_BOOTSTRAP_TOKEN  the admin token accepted from the first start
#   FORWARDED_ALLOW_IPS        uvicorn: which proxies may set X-Forwarded-* (default 127.0.0.1)
# Listening address and port are flags (see CMD).

ARG PYTHON_IMAGE=python:3.11-slim

# --- build: a virtual environment with the project and its pinned dependencies -------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/droidwire
WORKDIR /src
# Metadata first, then the packages the wheel is built from (pyproject.toml: hatch targets).
COPY pyproject.toml constraints.txt README.md ./
COPY protocol ./protocol
COPY controller ./controller
COPY droidwire ./droidwire
COPY device_bridge ./device_bridge
COPY fixer ./fixer
COPY gradle-workspace ./gradle-workspace
# The controller extra: FastAPI, uvicorn, SQLAlchemy, PostgreSQL, Redis, MCP, OpenAI, …
RUN /opt/droidwire/bin/pip install -c constraints.txt '.[controller]' \
 && /opt/droidwire/bin/droidwire --help > /dev/null

# --- runtime: the environment only, run by an unprivileged user -----------------------------
FROM ${PYTHON_IMAGE} AS runtime
# A fixed numeric UID/GID (the same in the bridge image) so Kubernetes' runAsNonRoot can verify
# it and shared volumes have one owner.
RUN groupadd --system --gid 10001 droidwire \
 && useradd --system --uid 10001 --gid droidwire --home-dir /var/lib/droidwire \
        --shell /usr/sbin/nologin droidwire \
 && install -d -o droidwire -g droidwire -m 0750 /var/lib/droidwire /var/lib/droidwire/tokens
COPY --from=build /opt/droidwire /opt/droidwire
ENV PATH=/opt/droidwire/bin:$PATH \
    HOME=/var/lib/droidwire \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DROIDWIRE_HEALTHCHECK_URL=http://127.0.0.1:8700/healthz
USER 10001:10001
WORKDIR /var/lib/droidwire
EXPOSE 8700
# /healthz is 200 while the controller reaches its database, 503 otherwise (urlopen raises on
# 503, so the exit status is non-zero). slim has no curl: Python does the request.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['DROIDWIRE_HEALTHCHECK_URL'], timeout=4)"]
ENTRYPOINT ["droidwire"]
CMD ["controller", "--host", "0.0.0.0", "--port", "8700"]
