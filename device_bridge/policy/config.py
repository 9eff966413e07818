"""The host owner's settings: the ``[policy]`` table of the bridge config, checked as it loads."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol.envelope import LABEL_PATTERN, MAX_LABELS, Profile

__all__ = ["PolicyConfig"]


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """The host owner's settings (the ``[policy]`` table of the bridge config).

    ``expose``: ``None`` exposes every attached device (the default), else only these serials.
    ``hide`` always wins over ``expose``. ``pause_file``: while this file exists, sharing is
    paused (a kill switch the owner flips with ``touch``, no restart needed).
    """

    profile: Profile = Profile.STANDARD
    devices: Mapping[str, Profile] = field(default_factory=dict)
    expose: frozenset[str] | None = None
    hide: frozenset[str] = frozenset()
    paused: bool = False
    pause_file: str | None = None
    # Placement labels and pool (controller selectors ``label=``/``pool=``): the host's, and
    # each device's own (added to, respectively put over, the host's).
    labels: tuple[str, ...] = ()
    pool: str | None = None
    device_labels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    device_pools: Mapping[str, str] = field(default_factory=dict)

    def labels_for(self, serial: str) -> tuple[list[str], str | None]:
        """The labels and pool the owner gave ``serial`` (host-wide ones included)."""
        labels = sorted({*self.labels, *self.device_labels.get(serial, ())})
        return labels, self.device_pools.get(serial, self.pool)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> PolicyConfig:
        """Build from a parsed TOML/JSON table; raises ``ValueError`` naming the bad key."""
        known = {"profile", "devices", "expose", "hide", "paused", "pause_file", "labels", "pool"}
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"policy: unknown key(s) {sorted(unknown)}")
        profile = _profile(raw.get("profile", Profile.STANDARD.value), "policy.profile")
        devices: dict[str, Profile] = {}
        device_labels: dict[str, tuple[str, ...]] = {}
        device_pools: dict[str, str] = {}
        raw_devices = raw.get("devices", {})
        if not isinstance(raw_devices, Mapping):
            raise ValueError("policy.devices must be a table of serial = profile")
        for serial, value in raw_devices.items():
            # Accept both `serial = "full"` and `[policy.devices."serial"] profile = "full"`.
            if isinstance(value, Mapping):
                extra = set(value) - {"profile", "labels", "pool"}
                if extra:
                    raise ValueError(f"policy.devices.{serial}: unknown key(s) {sorted(extra)}")
                if "labels" in value:
                    device_labels[str(serial)] = _labels(
                        value["labels"], f"policy.devices.{serial}.labels")
                if value.get("pool") is not None:
                    device_pools[str(serial)] = _label(
                        value["pool"], f"policy.devices.{serial}.pool")
                value = value.get("profile", profile.value)
            devices[str(serial)] = _profile(value, f"policy.devices.{serial}")
        expose_raw = raw.get("expose", "all")
        expose: frozenset[str] | None
        if expose_raw == "all":
            expose = None
        elif isinstance(expose_raw, list) and all(isinstance(s, str) for s in expose_raw):
            expose = frozenset(expose_raw)
        else:
            raise ValueError('policy.expose must be "all" or a list of serials')
        hide_raw = raw.get("hide", [])
        if not (isinstance(hide_raw, list) and all(isinstance(s, str) for s in hide_raw)):
            raise ValueError("policy.hide must be a list of serials")
        paused = raw.get("paused", False)
        if not isinstance(paused, bool):
            raise ValueError("policy.paused must be true or false")
        pause_file = raw.get("pause_file")
        if pause_file is not None and not isinstance(pause_file, str):
            raise ValueError("policy.pause_file must be a path")
        return cls(
            profile=profile,
            devices=devices,
            expose=expose,
            hide=frozenset(hide_raw),
            paused=paused,
            pause_file=os.path.expanduser(pause_file) if pause_file else None,
            labels=_labels(raw.get("labels", []), "policy.labels"),
            pool=_label(raw["pool"], "policy.pool") if raw.get("pool") is not None else None,
            device_labels=device_labels,
            device_pools=device_pools,
        )


def _label(value: object, where: str) -> str:
    if not isinstance(value, str) or not re.match(LABEL_PATTERN, value):
        raise ValueError(f"{where}: a label is 1-64 of A-Z a-z 0-9 . _ - (not {value!r})")
    return value


def _labels(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > MAX_LABELS:
        raise ValueError(f"{where} must be a list of at most {MAX_LABELS} labels")
    return tuple(sorted({_label(v, where) for v in value}))


def _profile(value: object, where: str) -> Profile:
    try:
        return Profile(str(value))
    except ValueError:
        names = ", ".join(p.value for p in Profile)
        raise ValueError(f"{where}: unknown profile {value!r} (one of {names})") from None

