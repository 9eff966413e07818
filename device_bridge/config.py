"""The bridge host owner's config file (TOML), read with :mod:`tomllib`.

Only the owner edits it; nothing the controller sends can change it (DESIGN.md §6)::

    [adb]
    server_port = 5037                  # default: $ANDROID_ADB_SERVER_PORT, else 5037
    connect = ["192.168.1.20:5555"]     # network devices to keep connected

    [policy]
    profile = "standard"                # default profile of every attached device
    expose = "all"                      # or a list of serials
    hide = ["emulator-5554"]            # never exposed, whatever `expose` says
    paused = false                      # start with sharing paused
    pause_file = "~/.droidwire/paused"  # while this file exists, sharing is paused

    [policy.devices]
    "R58M123ABC" = "full"               # my own phone
    "192.168.1.20:5555" = "instrument-only"

Unknown tables or keys are errors (a typo must not silently widen what is shared).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from device_bridge.policy import PolicyConfig

__all__ = ["AdbConfig", "ConfigError", "HostConfig", "load_host_config"]


class ConfigError(ValueError):
    """The config file is unreadable or invalid; the message names the file and the key."""


@dataclass(frozen=True, slots=True)
class AdbConfig:
    server_port: int | None = None
    connect: tuple[str, ...] = ()

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> AdbConfig:
        unknown = set(raw) - {"server_port", "connect"}
        if unknown:
            raise ValueError(f"adb: unknown key(s) {sorted(unknown)}")
        port = raw.get("server_port")
        if port is not None and (
            not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536
        ):
            raise ValueError("adb.server_port must be a TCP port number")
        connect = raw.get("connect", [])
        if not (
            isinstance(connect, list) and all(isinstance(a, str) and ":" in a for a in connect)
        ):
            raise ValueError('adb.connect must be a list of "HOST:PORT" strings')
        return cls(server_port=port, connect=tuple(connect))


@dataclass(frozen=True, slots=True)
class HostConfig:
    adb: AdbConfig = field(default_factory=AdbConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> HostConfig:
        unknown = set(raw) - {"adb", "policy"}
        if unknown:
            raise ValueError(f"unknown table(s) {sorted(unknown)}")
        adb_raw = raw.get("adb", {})
        policy_raw = raw.get("policy", {})
        if not isinstance(adb_raw, Mapping) or not isinstance(policy_raw, Mapping):
            raise ValueError("[adb] and [policy] must be tables")
        return cls(
            adb=AdbConfig.from_mapping(adb_raw), policy=PolicyConfig.from_mapping(policy_raw)
        )


def load_host_config(path: str | Path | None) -> HostConfig:
    """Read the owner's config; ``None`` gives the defaults (everything attached, standard)."""
    if path is None:
        return HostConfig()
    path = Path(path).expanduser()
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    try:
        return HostConfig.from_mapping(raw)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
