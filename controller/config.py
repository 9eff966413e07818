"""The controller's configuration: built by the CLI (or a test), read by ``create_app``.

Thin CLI → settings object → runner. Every default is defined once, here;
``droidwire controller --help`` and the docs read these constants. Timings and limits shared
with the bridge live in :class:`protocol.settings.Settings`, carried as ``settings``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from controller.store.url import UnsupportedDatabase, to_async_url
from protocol.settings import DEFAULTS, Settings

__all__ = [
    "DEFAULT_AGENT_FRAME_BYTES",
    "DEFAULT_AGENT_FRAME_TRACES",
    "DEFAULT_BORROWER_STREAMS_PER_BRIDGE",
    "DEFAULT_HOST",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_BRIDGES_PER_USER",
    "DEFAULT_MAX_UPLOAD_BYTES",
    "DEFAULT_PORT",
    "DEFAULT_STREAMS_PER_USER",
    "ENV_BOOTSTRAP_TOKEN",
    "ENV_DB",
    "ENV_REDIS",
    "MIN_BOOTSTRAP_TOKEN_CHARS",
    "ConfigError",
    "ControllerConfig",
    "default_db_url",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8700
# Seconds uvicorn waits for open connections (bridges, log streams) after a shutdown signal.
DEFAULT_GRACEFUL_SHUTDOWN_S = 10
# Agent evidence frames kept in the store (controller.agent.traces): the newest traces' only,
# at most this many traces and this many bytes of PNG (a real device's PNG is 1-3 MB).
DEFAULT_AGENT_FRAME_TRACES = 64
DEFAULT_AGENT_FRAME_BYTES = 256 * 1024 * 1024
# Request bodies (controller.limits): every route, and the routes taking prebuilt APKs (two
# APKs of at most a frame each, base64, plus the test).
DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024
DEFAULT_MAX_UPLOAD_BYTES = 48 * 1024 * 1024
# Tenancy quotas: bridges (bridge tokens) a user may hold; live logcat streams a user may hold
# across devices; and how many of a bridge's stream slots borrowers may take together (the
# rest is the owner's).
DEFAULT_MAX_BRIDGES_PER_USER = 16
DEFAULT_STREAMS_PER_USER = 16
DEFAULT_BORROWER_STREAMS_PER_BRIDGE = 16
# A bootstrap token is an admin password in all but name: refuse short ones.
MIN_BOOTSTRAP_TOKEN_CHARS = 16

ENV_DB = "DROIDWIRE_DB"
ENV_REDIS = "DROIDWIRE_REDIS"
ENV_BOOTSTRAP_TOKEN = "DROIDWIRE_BOOTSTRAP_TOKEN"


class ConfigError(ValueError):
    """A configuration value the controller cannot start with."""


def default_db_url() -> str:
    """SQLite under the user's data directory (``$XDG_DATA_HOME/droidwire/controller.db``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return f"sqlite:///{Path(base) / 'droidwire' / 'controller.db'}"


@dataclass(frozen=True, kw_only=True)
class ControllerConfig:
    # Listening
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    graceful_shutdown_s: int = DEFAULT_GRACEFUL_SHUTDOWN_S
    # State
    db_url: str = field(default_factory=default_db_url)
    redis_url: str | None = None  # None: single process, in-process routing
    # Auth: the admin token accepted from the first start (stored hashed, like any token).
    bootstrap_token: str | None = field(default=None, repr=False)
    # Agent evidence frames: retention bounds (the oldest traces' frames go first)
    agent_frame_traces: int = DEFAULT_AGENT_FRAME_TRACES
    agent_frame_bytes: int = DEFAULT_AGENT_FRAME_BYTES
    # Resource bounds (docs/security.md, "Bounds and secrets")
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    max_bridges_per_user: int = DEFAULT_MAX_BRIDGES_PER_USER
    streams_per_user: int = DEFAULT_STREAMS_PER_USER
    borrower_streams_per_bridge: int = DEFAULT_BORROWER_STREAMS_PER_BRIDGE
    # Timings and limits shared with the bridge
    settings: Settings = DEFAULTS
    # Uploads and downloads through /v1/devices/{device}/apps and /files (streamed, chunked):
    # their own limit, larger than and exempt from any limit on ordinary request bodies.
    max_transfer_bytes: int = 1024**3
    loan_sweep_s: float = 10.0  # how soon what a borrower left is removed after a loan expires
    health_poll_s: float = 30.0  # how often every connected device's health is read

    def __post_init__(self) -> None:
        try:
            to_async_url(self.db_url)
        except UnsupportedDatabase as exc:
            raise ConfigError(str(exc)) from exc
        if self.bootstrap_token is not None:
            token = self.bootstrap_token
            usable = token.isascii() and token.isprintable() and " " not in token
            if len(token) < MIN_BOOTSTRAP_TOKEN_CHARS or not usable:
                raise ConfigError(
                    f"the bootstrap token must be at least {MIN_BOOTSTRAP_TOKEN_CHARS} "
                    "printable ASCII characters without spaces (try: python -c "
                    "'import secrets; print(secrets.token_urlsafe(32))')"
                )
        if self.agent_frame_traces < 1 or self.agent_frame_bytes < 1:
            raise ConfigError("the agent frame bounds must be at least 1 trace and 1 byte")
        for name in ("max_body_bytes", "max_upload_bytes", "max_bridges_per_user",
                     "streams_per_user", "borrower_streams_per_bridge"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port {self.port} is out of range")

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> ControllerConfig:
        """Defaults, then ``DROIDWIRE_*`` variables, then explicit ``overrides``."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        if env.get(ENV_DB):
            values["db_url"] = env[ENV_DB]
        if env.get(ENV_REDIS):
            values["redis_url"] = env[ENV_REDIS]
        if env.get(ENV_BOOTSTRAP_TOKEN):
            values["bootstrap_token"] = env[ENV_BOOTSTRAP_TOKEN]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]
