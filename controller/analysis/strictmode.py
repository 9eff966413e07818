"""StrictMode violation headers, in every wording Android has logged them.

* Modern (API 28+, ``StrictMode.LOGCAT_LOGGER``): ``StrictMode policy violation; ~duration=92 ms:
  android.os.strictmode.DiskReadViolation``; ``~duration=`` is printed only when the duration is
  known, otherwise ``StrictMode policy violation: android.os.strictmode.X: <message>``.
* Old (API ≤ 27): ``… android.os.StrictMode$StrictModeDiskReadViolation: policy=31 violation=2``
  (``violation=`` is the BlockGuard bit: 1 disk write, 2 disk read, 4 network, 8 custom, with
  `` msg=…`` for custom calls).
* Old VmPolicy leaks at level E with no class: ``A resource was acquired at attached stack trace
  but never released.`` (then ``java.lang.Throwable: Explicit termination method …``).
* Stacks may continue with ``# via Binder call with stack:`` and ``android.os.StrictMode$LogStackTrace``:
  that continues a violation, it never starts one (see ``stack.stack_kind``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "KNOWN_KINDS",
    "LEAK_KINDS",
    "Header",
    "kind_from_frames",
    "kind_of_class",
    "parse_header",
    "violation_in_crash",
]

_CODES = {1: "DiskWrite", 2: "DiskRead", 4: "Network", 8: "Custom", 16: "ResourceMismatch",
          32: "UnbufferedIo"}
LEAK_KINDS = frozenset({"LeakedClosable", "SqliteObjectLeaked", "IntentReceiverLeaked",
                        "ServiceConnectionLeaked", "InstanceCount", "LeakedRegistrationObjects"})

_POLICY = "StrictMode policy violation"
_AFTER = re.compile(r"\s*(?:;\s*~duration=(-?\d+)\s*ms)?\s*[:.]?\s*(.*)$")
_CLASS = re.compile(r"([A-Za-z_][\w$]*(?:\.[\w$]+)*)(?::\s?(.*))?$")
_OLD = re.compile(r"policy=(\d+)\s+violation=(\d+)(?:\s+msg=(.*))?")
_IDE_LINK = re.compile(r"\s+\((?:Ask Gemini|Ask Studio Bot|Fix with AI|Explain[^)]*)\)\s*$")
_MODERN_CLASS = re.compile(r"android\.os\.strictmode\.(\w+Violation)\b")
_OLD_CLASS = re.compile(r"android\.os\.StrictMode\$(StrictMode\w*Violation|\w+Violation)\b")


@dataclass(frozen=True, slots=True)
class Header:
    kind: str
    duration_ms: int | None
    class_name: str | None
    message: str | None
    policy: int | None = None
    code: int | None = None


KNOWN_KINDS = (
    "DiskRead", "DiskWrite", "Network", "Custom", "ResourceMismatch", "UnbufferedIo",
    "LeakedClosable", "SqliteObjectLeaked", "InstanceCount", "IntentReceiverLeaked",
    "ServiceConnectionLeaked", "LeakedRegistrationObjects", "UntaggedSocket", "NonSdkApiUsed",
    "ContentUriWithoutPermission", "CleartextNetwork", "FileUriExposed",
    "CredentialProtectedWhileLocked", "ImplicitDirectBoot", "UnsafeIntentLaunch",
    "IncorrectContextUse", "WebViewMethodCalledOnWrongThread", "Explicit",
)
# The StrictMode frame that detected a thread violation names its kind (a header cut short).
_DETECTORS = {"onReadFromDisk": "DiskRead", "onWriteToDisk": "DiskWrite",
              "onNetwork": "Network", "onUntaggedSocket": "UntaggedSocket",
              "noteSlowCall": "Custom", "onCustomSlowCall": "Custom",
              "onUnbufferedIO": "UnbufferedIo", "onResourceMismatch": "ResourceMismatch",
              "onNonSdkApiUsed": "NonSdkApiUsed", "onCleartextNetworkDetected": "CleartextNetwork"}


def kind_of_class(class_name: str, code: int | None = None) -> str:
    """``android.os.StrictMode$StrictModeDiskReadViolation`` → ``DiskRead``.

    A class name cut short by a truncated line completes to the one known kind it starts
    (``android.os.strictmode.DiskRe`` → ``DiskRead``); anything else that is not a
    ``…Violation`` class is ``Unknown``.
    """
    simple = class_name.rsplit(".", 1)[-1].rsplit("$", 1)[-1]
    complete = simple.endswith("Violation")
    if simple.startswith("StrictMode"):
        simple = simple[len("StrictMode"):]
    if complete:
        simple = simple[: -len("Violation")]
    if not simple and code is not None:
        simple = _CODES.get(code, "")
    if not simple and code is not None:
        # A mask of several bits: name the lowest known one.
        simple = next((v for bit, v in sorted(_CODES.items()) if code & bit), "")
    if not complete and simple not in KNOWN_KINDS:
        candidates = [k for k in KNOWN_KINDS if k.startswith(simple)] if len(simple) >= 3 else []
        simple = candidates[0] if len(candidates) == 1 else ""
    return simple or "Unknown"


def kind_from_frames(frames: list[str]) -> str | None:
    """The kind named by StrictMode's own detector frame, for a header that lost its class."""
    for f in frames[:4]:
        if f.startswith("android.os.StrictMode"):
            method = f.split("(", 1)[0].rsplit(".", 1)[-1]
            if method in _DETECTORS:
                return _DETECTORS[method]
    return None


def _body(body: str, duration: int | None) -> Header:
    body = _IDE_LINK.sub("", body[:2000]).strip()
    m = _CLASS.match(body)
    if not m:
        return Header("Unknown", duration, None, body or None)
    cls, rest = m[1], (m[2].strip() if m[2] else None)
    policy = code = None
    if rest:
        o = _OLD.match(rest)
        if o:
            policy, code = int(o[1]), int(o[2])
            rest = o[3].strip() if o[3] else None
    return Header(kind_of_class(cls, code), duration, cls, rest or None, policy, code)


def parse_header(msg: str, tag: str | None) -> Header | None:
    """The violation a log message starts, or None. ``tag`` is the log tag when known."""
    i = msg.find(_POLICY)
    if i >= 0:
        m = _AFTER.match(msg, i + len(_POLICY))
        if m is None:  # pragma: no cover - the pattern matches any tail
            return None
        duration = int(m[1]) if m[1] is not None and int(m[1]) >= 0 else None
        return _body(m[2], duration)
    s = msg.strip()
    if s.startswith("android.os.strictmode.") or s.startswith("android.os.StrictMode$"):
        # The violation itself as a Throwable: a penaltyListener that logs it, or a paste that
        # lost the header. Any tag: the class name is unambiguous.
        if _MODERN_CLASS.match(s) or _OLD_CLASS.match(s):
            return _body(s, None)
        return None
    if tag not in (None, "StrictMode"):
        return None
    if s.startswith("A resource was acquired at attached stack trace but never released"):
        return Header("LeakedClosable", None, None, s)
    if tag == "StrictMode":
        if s.startswith("Finalizing a Cursor that has not been deactivated or closed") or (
                s.startswith("A SQLiteConnection object for database") and "leaked" in s):
            return Header("SqliteObjectLeaked", None, None, s)
        if s.startswith("android.app.IntentReceiverLeaked"):
            return Header("IntentReceiverLeaked", None, "android.app.IntentReceiverLeaked", s)
        if s.startswith("android.app.ServiceConnectionLeaked"):
            return Header("ServiceConnectionLeaked", None, "android.app.ServiceConnectionLeaked", s)
    return None


def violation_in_crash(lines: list[str]) -> Header | None:
    """The StrictMode violation behind a penaltyDeath crash (exception or ``Caused by`` lines)."""
    for text in lines:
        s = text.strip()
        if s.startswith("Caused by:"):
            s = s[len("Caused by:"):].strip()
        if _MODERN_CLASS.match(s) or _OLD_CLASS.match(s):
            return _body(s, None)
    return None
