"""Device selectors (docs/design.md §9, ``droidwire run --device SEL``).

A selector is one of:

* an id: the device's serial when it is unique, or ``BRIDGE~SERIAL``;
* ``all``: every ready device the caller may use;
* ``any``: one ready device (the default when no selector is given);
* a count ``N`` (1–100): that many ready devices;
* a property test ``KEY OP VALUE`` with KEY ``sdk`` (integer compare) or ``model``,
  ``release``, ``manufacturer``, ``abi``, ``bridge`` (``=`` / ``!=`` on the text), OP one of
  ``>= <= > < = == !=``: every ready device that matches;
* ``owner=WHO`` / ``owner!=WHO``: devices whose bridge belongs (or not) to WHO, a user's name
  or id, or ``me`` (the caller);
* ``label=NAME`` / ``label!=NAME``: every ready device that has (or has not) that label;
* ``pool=NAME``: one ready device of that pool.

``any``, a count and ``pool=`` take the first devices of the list they are given: the executor
hands it ordered least-loaded first (:mod:`controller.executor.placement`).

Several selectors are a union, in order, without duplicates. No selector at all picks one
ready device. A selector that names nothing is not an error here: the executor reports
``no_device``. A selector that holds a comparison (``< > = !``) but is not a property test
— a misspelt key such as ``skd>=30`` — is ``bad_request`` naming the keys: no device id
holds those characters, so it can only be a typo.

Lending never changes what a borrower's selector picks: each selector is tried on the
caller's own devices first (those they may use without a loan: their own, or every device
for an admin), and reaches devices lent to them only when nothing of their own matches. A
lent device is always reached by its full id ``BRIDGE~SERIAL`` (nothing of one's own has
that id). Ids never resolve across owners: ``~`` separates the bridge from the serial and
no serial may contain it (:mod:`controller.hub.inventory`).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from controller.executor.gateway import DeviceView
from protocol.errors import ErrorCode, RpcError

__all__ = ["MAX_COUNT", "parse_selector", "select_devices"]

MAX_COUNT = 100
MAX_SELECTOR_CHARS = 200
_KEYS = ("sdk", "model", "release", "manufacturer", "abi", "bridge", "owner", "label", "pool")
_COMPARISON = re.compile(r"^\s*([^<>=!]*?)\s*(>=|<=|==|!=|=|>|<)")
_PROPERTY = re.compile(rf"^({'|'.join(_KEYS)})\s*(>=|<=|==|!=|=|>|<)\s*(.+)$")
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "=": operator.eq,
    "==": operator.eq,
    "!=": operator.ne,
}
Matcher = Callable[[Sequence[DeviceView]], list[DeviceView]]


def parse_selector(
    text: str, *, me: str | None = None, owner_names: Mapping[str, str] | None = None
) -> Matcher:
    """A function picking devices from the ready ones; ``bad_request`` for a malformed one.

    ``me`` is the caller's user id and ``owner_names`` maps user ids to names, for ``owner``.
    """
    sel = text.strip()
    if not sel or len(sel) > MAX_SELECTOR_CHARS or not sel.isprintable():
        raise RpcError(ErrorCode.BAD_REQUEST, "a device selector must be 1-200 printable chars")
    if sel == "all":
        return lambda devices: list(devices)
    if sel == "any":
        return lambda devices: list(devices)[:1]
    if sel.isdigit():
        count = int(sel)
        if not 1 <= count <= MAX_COUNT:
            raise RpcError(ErrorCode.BAD_REQUEST, f"a device count must be 1-{MAX_COUNT}")
        return lambda devices: list(devices)[:count]
    match = _PROPERTY.match(sel)
    if match:
        key, op, raw = match.group(1), match.group(2), match.group(3).strip()
        if key == "sdk":
            if not raw.isdigit():
                raise RpcError(ErrorCode.BAD_REQUEST, f"sdk compares to an integer, not {raw!r}")
            want: Any = int(raw)
        elif key == "pool" and op not in ("=", "=="):
            raise RpcError(ErrorCode.BAD_REQUEST, "pool selects with = only (pool=NAME)")
        elif op in ("=", "==", "!="):
            want = raw
        else:
            raise RpcError(ErrorCode.BAD_REQUEST, f"{key} compares with = or != only")
        compare = _OPS[op]
        names = owner_names or {}

        def owner_of(d: DeviceView) -> str | None:
            if want == "me":
                return "me" if me is not None and d.owner_id == me else d.owner_id
            return want if want in (d.owner_id, names.get(d.owner_id)) else d.owner_id

        if key == "label":
            def by_label(devices: Sequence[DeviceView]) -> list[DeviceView]:
                return [d for d in devices if (want in _labels(d)) == (op != "!=")]

            return by_label
        if key == "pool":
            return lambda devices: [d for d in devices if d.info.get("pool") == want][:1]

        def by_property(devices: Sequence[DeviceView]) -> list[DeviceView]:
            out = []
            for d in devices:
                if key == "owner":
                    value: Any = owner_of(d)
                elif key == "bridge":
                    value = d.bridge_name
                else:
                    value = d.info.get(key)
                if value is None:
                    continue
                if key == "sdk" and not isinstance(value, int):
                    continue
                if compare(value if key == "sdk" else str(value), want):
                    out.append(d)
            return out

        return by_property

    typo = _COMPARISON.match(sel)
    if typo:
        raise RpcError(
            ErrorCode.BAD_REQUEST,
            f"unknown device property {typo.group(1)!r} in selector {sel!r}: "
            f"use one of {', '.join(_KEYS)}",
            {"selector": sel},
        )

    def by_id(devices: Sequence[DeviceView]) -> list[DeviceView]:
        exact = [d for d in devices if d.id == sel]
        if exact:
            return exact
        by_serial = [d for d in devices if d.serial == sel]
        if len(by_serial) > 1:
            raise RpcError(
                ErrorCode.CONFLICT,
                f"serial {sel!r} is on several bridges: name it as BRIDGE~SERIAL",
                {"candidates": sorted(d.id for d in by_serial)},
            )
        return by_serial

    return by_id


def _labels(device: DeviceView) -> set[str]:
    labels = device.info.get("labels")
    return {str(x) for x in labels} if isinstance(labels, list) else set()


def select_devices(
    selectors: Iterable[str],
    devices: Sequence[DeviceView],
    *,
    only_ready: bool = True,
    me: str | None = None,
    owner_names: Mapping[str, str] | None = None,
    lent: Callable[[DeviceView], bool] | None = None,
) -> list[DeviceView]:
    """The ready devices the selectors pick (union, in order); one device when none given.

    ``only_ready=False`` looks at every device, to tell *why* nothing was picked. ``lent``
    tells the devices the caller uses through a loan: a selector (and no selector) picks
    among them only when it picks nothing of the caller's own.
    """
    matchers = [parse_selector(s, me=me, owner_names=owner_names) for s in selectors]
    if lent is None:
        tiers = [list(devices)]
    else:  # the caller's own devices, then those lent to them
        tiers = [[d for d in devices if not lent(d)], [d for d in devices if lent(d)]]
    chosen: dict[str, DeviceView] = {}
    for matcher in matchers or [lambda ds: list(ds)[:1]]:
        for tier in tiers:
            # The tier is decided on every device, ready or not: the caller's own device that
            # is offline still holds its selector (the run waits or fails; it never goes to
            # a lent device that happens to match the same selector).
            if not _names_any(matcher, tier):
                continue
            ready = [d for d in tier if d.ready or not only_ready]
            for d in matcher(ready):
                chosen.setdefault(d.id, d)
            break
    return list(chosen.values())


def _names_any(matcher: Matcher, devices: Sequence[DeviceView]) -> bool:
    """Whether ``matcher`` names anything among ``devices`` (an ambiguous serial does)."""
    try:
        return bool(matcher(devices))
    except RpcError:
        return True
