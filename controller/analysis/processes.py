"""Which pid is which process: learned from the system's own lines.

Sources: ``Start proc 3552:com.pkg/u0a0 for activity …`` (and the pre-7.0 ``Start proc com.pkg
for activity …: pid=3552 uid=…``), events ``am_proc_start``, a crash's ``Process: name, PID: n``,
an ANR's ``PID:``, ``Killing 1234:com.pkg/u0a12 (adj 900): reason``, ``Process com.pkg (pid 1234)
has died``, a tombstone's ``pid: 1234, tid: 1234, name: x  >>> com.pkg <<<``, Android Studio's ``PROCESS STARTED (1234) for package com.pkg`` separators and its
process column. Deaths are collected on the way.
"""

from __future__ import annotations

import re

__all__ = ["belongs_to", "parse_death", "parse_start", "start_host"]

_SCAN = 2000   # these lines are short: never run a pattern over a pathological one
_START = re.compile(r"Start proc (\d+):([^\s/{]+)")
_HOST = re.compile(r" for [\w-]+(?: [\w-]+)?\s+\{?([\w.]+)(?:[/}\s:]|$)")
_START_OLD = re.compile(r"Start proc ([^\s/{]+) for .*?pid=(\d+)")
_AM_PROC_START = re.compile(r"\[\s*\d+\s*,\s*(\d+)\s*,\s*\d+\s*,\s*([^,\]\s]+)")
_STUDIO_SEP = re.compile(r"PROCESS (STARTED|ENDED) \((\d+)\) for package (\S+)")
_KILLING = re.compile(r"Killing (\d+):([^\s/]+)\S*\s*(?:\(adj -?\d+\))?:?\s*(.*)$")
_DIED = re.compile(r"Process (\S+) \(pid (\d+)\) has died(.*)$")
_SIGNAL = re.compile(r"Fatal signal (\d+) \((\w+)\).*?pid (\d+) \(([^)]*)\)")
# Android ≤ 7 names only the thread (``… in tid 2363 (com.hlw.movie)``): libc logs it from the
# dying process itself, so the line's own pid is the process's.
_SIGNAL_OLD = re.compile(r"Fatal signal (\d+) \((\w+)\)")
_TOMBSTONE = re.compile(r"pid: (\d+), tid: \d+, name: .*?>>> (\S+) <<<")
_VM_DEATH = "StrictMode VmPolicy violation with POLICY_DEATH"


def parse_start(msg: str, tag: str | None) -> tuple[int, str] | None:
    """``(pid, process)`` when the line announces a process start."""
    msg = msg[:_SCAN]
    if "Start proc" in msg:
        m = _START.search(msg)
        if m:
            return int(m[1]), m[2]
        m = _START_OLD.search(msg)
        if m:
            return int(m[2]), m[1]
    if tag == "am_proc_start":
        m = _AM_PROC_START.match(msg.strip())
        if m:
            return int(m[1]), m[2]
    m = _STUDIO_SEP.search(msg) if "PROCESS STARTED" in msg else None
    if m:
        return int(m[2]), m[3]
    return None


def parse_death(msg: str, pid: int | None) -> tuple[int | None, str | None, str] | None:
    """``(pid, process, reason)`` when the line reports a process dying."""
    msg = msg[:_SCAN]
    if "Killing" in msg:
        m = _KILLING.search(msg)
        if m:
            return int(m[1]), m[2], ("killed: " + m[3]).strip().rstrip(":")
    if "has died" in msg:
        m = _DIED.search(msg)
        if m:
            detail = m[3].strip().lstrip(":").strip()
            return int(m[2]), m[1], "died" + (f": {detail}" if detail else "")
    if "Fatal signal" in msg:
        m = _SIGNAL.search(msg)
        if m:
            return int(m[3]), m[4], f"signal {m[1]} ({m[2]})"
        m = _SIGNAL_OLD.search(msg)
        if m:
            return pid, None, f"signal {m[1]} ({m[2]})"
    if ">>> " in msg:
        m = _TOMBSTONE.search(msg)
        if m:
            return int(m[1]), m[2], "native crash (tombstone)"
    if "PROCESS ENDED" in msg:
        m = _STUDIO_SEP.search(msg)
        if m:
            return int(m[2]), m[3], "process ended"
    if _VM_DEATH in msg:
        return pid, None, "StrictMode VmPolicy penaltyDeath"
    return None


def start_host(msg: str) -> str | None:
    """The package whose component a ``Start proc`` line starts the process for
    (``… for activity {com.pkg/.Main}``, ``… for added application com.pkg``): a process with
    a custom name (``android:process="a3e.process"``) still belongs to that package."""
    m = _HOST.search(msg[:_SCAN])
    return m[1] if m else None


def belongs_to(process: str | None, package: str) -> bool:
    """A process name belongs to a package: itself or one of its ``pkg:suffix`` processes."""
    if not process:
        return False
    return process == package or process.startswith(package + ":")
