# syntax=docker/dockerfile:1
# droidwire bridge image: `droidwire bridge`, and `droidwire sim-device` for a trial without a
# phone. Build from the repository root (the build context):
#
#   docker build -f deploy/docker/bridge.Dockerfile -t droidwire/bridge .
#
# Configuration: a TOML file (DROIDWIRE_BRIDGE_CONFIG, see deploy/examples/bridge.toml) and the
# bridge's environment: DROIDWIRE_CONTROLLER, DROIDWIRE_BRIDGE_TOKEN, DROIDWIRE_ADB_CONNECT.
# USB phones: pass the bus in (`--device /dev/bus/usb`) and the host's plugdev GID
# (`--group-add`); on a Raspberry Pi the systemd unit is the simpler road
# (deploy/raspberry-pi.md).

ARG PYTHON_IMAGE=python:3.11-slim

# --- build: a virtual environment with the project and its pinned dependencies -------------
# The bridge-only install (no controller: no FastAPI, SQLAlchemy, Redis, MCP, OpenAI) plus the
# `sim` extra, for `droidwire sim-device` trials; a bridge host outside Docker needs neither:
# `pip install droidwire` (deploy/README.md, "What to install where").
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/droidwire
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY protocol ./protocol
COPY controller ./controller
COPY droidwire ./droidwire
COPY device_bridge ./device_bridge
COPY fixer ./fixer
COPY gradle-workspace ./gradle-workspace
RUN /opt/droidwire/bin/pip install -c constraints.txt '.[sim]' \
 && /opt/droidwire/bin/droidwire --help > /dev/null

# --- runtime ---------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
ARG TARGETARCH
# adbutils bundles an adb binary for x86-64 only; Google publishes no Linux arm64 platform
# tools, so other architectures take Debian's adb (adbutils finds `adb` on PATH first).
RUN if [ "${TARGETARCH:-amd64}" != "amd64" ]; then \
        apt-get update \
     && apt-get install -y --no-install-recommends adb \
     && rm -rf /var/lib/apt/lists/*; \
    fi
# plugdev: the group the udev rules give USB phones to (deploy/udev/).
RUN groupadd --system --gid 10001 droidwire \
 && useradd --system --uid 10001 --gid droidwire --groups plugdev \
        --home-dir /var/lib/droidwire --shell /usr/sbin/nologin droidwire \
 && install -d -o droidwire -g droidwire -m 0750 /var/lib/droidwire /var/lib/droidwire/tokens
COPY --from=build /opt/droidwire /opt/droidwire
# HOME holds adb's key pair (~/.android) and the build workspaces (~/.local/state/droidwire).
# A controller not reachable yet (started in the same compose) is waited for 10 minutes, not
# given up after the interactive default of 10 s.
ENV PATH=/opt/droidwire/bin:$PATH \
    HOME=/var/lib/droidwire \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DROIDWIRE_START_BUDGET=600
USER 10001:10001
WORKDIR /var/lib/droidwire
# The bridge dials out: it listens on nothing. A simulated device listens on 5555 (loopback by
# default; share the bridge's network namespace rather than publishing it: it has no auth).
ENTRYPOINT ["droidwire"]
CMD ["bridge"]
