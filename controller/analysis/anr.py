"""ANR reports from ActivityManager (or vendor ``ActivityManagerService``).

Header forms: ``ANR in pkg (pkg/.Act)``, ``ANR in pkg`` (service, broadcast and foreground-service
ANRs have no component), ``ANR in  ***`` (redacted), vendor ``ANR in pkg, time=676573627``. The
fields follow on the next lines: ``PID:``, ``Reason:``, and on Android 13+ ``Parent:``,
``ErrorId:``, ``Frozen:``; then load, PSI and CPU tables we do not need. The events buffer has
``am_anr: [user,pid,pkg,flags,reason]``. ActivityManager's ``Timeout executing service:
ServiceRecord{… u0 pkg/cls}`` comes first and always leads to that service's ANR: a log cut before
the ``ANR in`` line still has it (the later ``ANR in`` or ``am_anr`` completes the same ANR).
"""

from __future__ import annotations

import re

__all__ = ["FIELD_WINDOW", "parse_am_anr", "parse_field", "parse_header", "parse_service_timeout"]

FIELD_WINDOW = 40   # lines after a header that may still carry its fields

_HEADER = re.compile(r"ANR in\s+([^\s,(]+)(?:,\s*time=\d+)?(?:\s*\(([^()\s]*)\))?")
_FIELD = re.compile(r"\s*(PID|Reason|Parent|Frozen|ErrorId|Subject)\s*:\s?(.*)$")
_SERVICE_TIMEOUT = re.compile(
    r"Timeout executing service:\s*ServiceRecord\{\S+\s+u\d+\s+([\w.]+)/([\w.$]+)\}")
_AM_ANR = re.compile(r"\[\s*\d+\s*,\s*(\d+)\s*,\s*([^,\]]+?)\s*,\s*[^,\]]*,\s*(.*?)\]?\s*$")


def parse_header(msg: str, tag: str | None = None) -> tuple[str, str | None] | None:
    """``(package, component)`` for an ``ANR in`` line (system tags, or no tag in a paste)."""
    if tag and not any(word in tag for word in ("Activity", "ANR", "Anr", "am_")):
        return None
    m = _HEADER.match(msg.lstrip()[:2000])
    if not m:
        return None
    return m[1], (m[2] or None)


def parse_field(msg: str) -> tuple[str, str] | None:
    m = _FIELD.match(msg)
    return (m[1], m[2].strip()) if m else None


def parse_am_anr(msg: str) -> tuple[int, str, str] | None:
    m = _AM_ANR.match(msg.strip()[:2000])
    return (int(m[1]), m[2], m[3]) if m else None


def parse_service_timeout(msg: str, tag: str | None = None) -> tuple[str, str, str] | None:
    """``(package, component, reason)`` for ActivityManager's service-timeout line."""
    if tag and "Activity" not in tag:
        return None
    m = _SERVICE_TIMEOUT.search(msg[:2000])
    if not m:
        return None
    component = f"{m[1]}/{m[2]}"
    return m[1], component, f"executing service {component}"
