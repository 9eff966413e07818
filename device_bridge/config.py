"""The bridge host owner's config file (TOML), read with :mod:`tomllib`.

Only the owner edits it; nothing the controller sends can change it (docs/design.md §6). Every key
is also a flag or an environment variable of ``droidwire bridge`` (flag > env > file >
default; the CLI hands them over as ``overrides`` keyed ``"table.key"``)::

    [controller]
    url = ["wss://ctl.example"]          # --controller (repeatable: failover), DROIDWIRE_CONTROLLER
    token_file = "~/.droidwire/bridge.token"   # or token = "…"; --token, DROIDWIRE_BRIDGE_TOKEN
    ca = "/etc/droidwire/ca.pem"         # --ca, DROIDWIRE_CA: trust this CA for wss://
    verify = true                        # --no-verify, DROIDWIRE_TLS_VERIFY=0 (tests only!)
    allow_plain = false                  # --allow-plain: ws:// to a host other than loopback

    [adb]
    host = "127.0.0.1"                  # --adb-host
    server_port = 5037                  # --adb-port; default: $ANDROID_ADB_SERVER_PORT, else 5037
    connect = ["192.168.1.20:5555"]     # --adb-connect (repeatable), DROIDWIRE_ADB_CONNECT
    start_server = true                 # start the adb server if none runs on that port

    [link]                              # docs/design.md §4; defaults: protocol.settings.DEFAULTS
    concurrency = 16                    # --concurrency: RPC handlers at once
    reconnect_budget_s = 1800           # --reconnect-budget
    backoff_first_max_s = 0.5           # --backoff-first-max
    backoff_base_s = 1.0                # --backoff-base
    backoff_cap_s = 60.0                # --backoff-cap
    ping_interval_s = 10.0              # --ping-interval (0: off)
    ping_timeout_s = 10.0               # --ping-timeout (0: off)
    close_timeout_s = 2.0               # --close-timeout
    handshake_timeout_s = 10.0          # --handshake-timeout

    [policy]
    profile = "standard"                # default profile of every attached device
    expose = "all"                      # or a list of serials (--expose, repeatable)
    hide = ["emulator-5554"]            # never exposed, whatever `expose` says (--hide)
    paused = false                      # start with sharing paused (--paused)
    pause_file = "~/.droidwire/paused"  # while this file exists, sharing is paused

    [policy.devices]                    # --device-profile SERIAL=PROFILE (repeatable)
    "R58M123ABC" = "full"               # my own phone
    "192.168.1.20:5555" = "instrument-only"

    [build]                             # see device_bridge.build.from_config
    toolchain = "auto"

Unknown tables or keys are errors (a typo must not silently widen what is shared).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from device_bridge.policy import PolicyConfig
from protocol.settings import DEFAULTS, Settings

__all__ = [
    "AdbConfig",
    "ConfigError",
    "ControllerConfig",
    "HostConfig",
    "LinkConfig",
    "load_host_config",
]


class ConfigError(ValueError):
    """The config file is unreadable or invalid; the message names the file and the key."""


def _str_list(value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not (isinstance(value, list | tuple) and all(isinstance(v, str) and v for v in value)):
        raise ValueError(f"{key} must be a string or a list of strings")
    return tuple(value)


def _bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in (
        "1",
        "true",
        "yes",
        "on",
        "0",
        "false",
        "no",
        "off",
    ):
        return value.lower() in ("1", "true", "yes", "on")
    raise ValueError(f"{key} must be true or false")


@dataclass(frozen=True, slots=True)
class AdbConfig:
    server_port: int | None = None
    connect: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    start_server: bool = True

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> AdbConfig:
        unknown = set(raw) - {"server_port", "connect", "host", "start_server"}
        if unknown:
            raise ValueError(f"adb: unknown key(s) {sorted(unknown)}")
        port = raw.get("server_port")
        if isinstance(port, str) and port.isdigit():
            port = int(port)
        if port is not None and (
            not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536
        ):
            raise ValueError("adb.server_port must be a TCP port number")
        connect = raw.get("connect", [])
        if isinstance(connect, str):
            connect = [connect]
        if not (
            isinstance(connect, list | tuple)
            and all(isinstance(a, str) and ":" in a for a in connect)
        ):
            raise ValueError('adb.connect must be a list of "HOST:PORT" strings')
        host = raw.get("host", "127.0.0.1")
        if not isinstance(host, str) or not host:
            raise ValueError("adb.host must be a host name or address")
        return cls(
            server_port=port,
            connect=tuple(connect),
            host=host,
            start_server=_bool(raw.get("start_server", True), "adb.start_server"),
        )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Where the bridge dials and how it proves who it is."""

    urls: tuple[str, ...] = ()
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    ca: str | None = None
    verify: bool = True
    allow_plain: bool = False

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> ControllerConfig:
        known = {"url", "token", "token_file", "ca", "verify", "allow_plain"}
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"controller: unknown key(s) {sorted(unknown)}")
        urls = _str_list(raw.get("url", []), "controller.url")
        allow_plain = _bool(raw.get("allow_plain", False), "controller.allow_plain")
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("ws", "wss", "http", "https"):
                raise ValueError(f"controller.url {url!r}: use wss:// (or https://)")
            if parts.query or parts.fragment or parts.username or parts.password:
                raise ValueError(
                    f"controller.url {url!r} must not carry credentials or a query: "
                    "the token goes in the Authorization header"
                )
            plain = parts.scheme in ("ws", "http")
            if plain and not allow_plain and not _is_loopback(parts.hostname or ""):
                raise ValueError(
                    f"controller.url {url!r}: plain ws:// only to loopback; use wss:// "
                    "(or set controller.allow_plain on a network you trust)"
                )
        token = raw.get("token")
        if token is not None and (not isinstance(token, str) or not token.strip()):
            raise ValueError("controller.token must be a non-empty string")
        token_file = raw.get("token_file")
        if token_file is not None and not isinstance(token_file, str):
            raise ValueError("controller.token_file must be a path")
        ca = raw.get("ca")
        if ca is not None and not isinstance(ca, str):
            raise ValueError("controller.ca must be a path")
        return cls(
            urls=urls,
            token=token.strip() if token else None,
            token_file=os.path.expanduser(token_file) if token_file else None,
            ca=os.path.expanduser(ca) if ca else None,
            verify=_bool(raw.get("verify", True), "controller.verify"),
            allow_plain=allow_plain,
        )

    def resolve_token(self) -> str:
        """The token itself, or the first line of ``token_file``; ConfigError if neither."""
        if self.token:
            return self.token
        if self.token_file:
            try:
                text = Path(self.token_file).read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(
                    f"{self.token_file}: cannot read the bridge token: {exc.strerror or exc}"
                ) from exc
            token = text.strip().splitlines()[0].strip() if text.strip() else ""
            if token:
                return token
            raise ConfigError(f"{self.token_file}: the bridge token file is empty")
        raise ConfigError(
            "no bridge token: pass --token-file FILE (make one with `droidwire token create "
            "--kind bridge NAME > FILE`), or set DROIDWIRE_BRIDGE_TOKEN "
            "(or controller.token_file in the --config file)"
        )


# [link] key -> Settings field (keys without the suffix are accepted as the same).
_LINK_KEYS: dict[str, str] = {
    "concurrency": "handler_concurrency",
    "reconnect_budget_s": "reconnect_budget_s",
    "backoff_first_max_s": "backoff_first_max_s",
    "backoff_base_s": "backoff_base_s",
    "backoff_factor": "backoff_factor",
    "backoff_cap_s": "backoff_cap_s",
    "ping_interval_s": "ping_interval_s",
    "ping_timeout_s": "ping_timeout_s",
    "close_timeout_s": "close_timeout_s",
    "handshake_timeout_s": "handshake_timeout_s",
}


@dataclass(frozen=True, slots=True)
class LinkConfig:
    """Overrides of :class:`protocol.settings.Settings` for the link (unset: the default)."""

    values: Mapping[str, float | int | None] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> LinkConfig:
        unknown = set(raw) - set(_LINK_KEYS)
        if unknown:
            raise ValueError(f"link: unknown key(s) {sorted(unknown)}")
        values: dict[str, float | int | None] = {}
        for key, value in raw.items():
            name = _LINK_KEYS[key]
            if isinstance(value, str):
                try:
                    value = float(value)
                except ValueError:
                    raise ValueError(f"link.{key} must be a number") from None
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise ValueError(f"link.{key} must be a non-negative number")
            if name in ("ping_interval_s", "ping_timeout_s") and value == 0:
                values[name] = None  # 0 turns the keepalive off
                continue
            if name == "handler_concurrency":
                if int(value) != value or not 1 <= value <= 1024:
                    raise ValueError("link.concurrency must be an integer from 1 to 1024")
                value = int(value)
            values[name] = value
        try:
            cls(values=values).settings()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"link: {exc}") from None
        return cls(values=values)

    def settings(self, base: Settings = DEFAULTS) -> Settings:
        changes: dict[str, Any] = dict(self.values)
        return dataclasses.replace(base, **changes)


@dataclass(frozen=True, slots=True)
class HostConfig:
    adb: AdbConfig = field(default_factory=AdbConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    link: LinkConfig = field(default_factory=LinkConfig)
    build: Mapping[str, Any] | None = None  # the [build] table, for build.from_config
    base: Path | None = None  # the config file's directory (relative paths in [build])

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], *, base: Path | None = None) -> HostConfig:
        tables = {"adb", "policy", "controller", "link", "build"}
        unknown = set(raw) - tables
        if unknown:
            raise ValueError(f"unknown table(s) {sorted(unknown)}")
        parts = {name: raw.get(name, {}) for name in tables}
        if not all(isinstance(v, Mapping) for v in parts.values()):
            raise ValueError("[adb], [policy], [controller], [link] and [build] must be tables")
        return cls(
            adb=AdbConfig.from_mapping(parts["adb"]),
            policy=PolicyConfig.from_mapping(parts["policy"]),
            controller=ControllerConfig.from_mapping(parts["controller"]),
            link=LinkConfig.from_mapping(parts["link"]),
            build=dict(parts["build"]) if "build" in raw else None,
            base=base,
        )


def _apply(raw: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` with ``{"table.key": value}`` set; ``None`` values (not given) are skipped."""
    out = {k: dict(v) if isinstance(v, Mapping) else v for k, v in raw.items()}
    for dotted, value in overrides.items():
        if value is None or value == () or value == []:
            continue
        table, _, key = dotted.partition(".")
        section = out.setdefault(table, {})
        if not isinstance(section, dict):
            raise ValueError(f"[{table}] must be a table")
        current = section.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            section[key] = {**current, **value}  # e.g. one more device's profile
        else:
            section[key] = list(value) if isinstance(value, tuple) else value
    return out


def load_host_config(
    path: str | Path | None, overrides: Mapping[str, Any] | None = None
) -> HostConfig:
    """Read the owner's config, then apply ``overrides`` (flags and environment).

    ``None`` and no overrides give the defaults (everything attached, standard profile).
    """
    raw: dict[str, Any] = {}
    where = "configuration"
    base: Path | None = None
    if path is not None:
        path = Path(path).expanduser()
        where = str(path)
        base = path.parent
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    try:
        if overrides:
            raw = _apply(raw, overrides)
        return HostConfig.from_mapping(raw, base=base)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
