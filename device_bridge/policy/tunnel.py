"""The adb services a tunnel opens, and the requests on its ``sync:`` streams (docs/tunnel.md).

A shell or exec service is checked as a command (adb's own ``logcat`` and ``cmd package
install…`` forms included) and re-quoted; ``sync:`` has every request's path confined as
pushes and pulls are; forwards, debugger connections and the framebuffer follow the profile;
``reverse`` is not carried; services that change adbd itself are the owner's (``full``) alone.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from device_bridge.policy.allowlist import PACKAGE, bad_arg, validate_logcat
from device_bridge.policy.context import CommandContext
from device_bridge.policy.denylist import check_denied
from device_bridge.policy.lexical import parse_command
from device_bridge.policy.paths import in_workspace
from device_bridge.policy.rules import Rule, refuse
from protocol.envelope import Profile

if TYPE_CHECKING:
    from device_bridge.policy.checks import Policy

__all__ = ["TunnelOpen", "check_sync_request", "check_tunnel_service"]


# adb's `adb logcat` runs `export ANDROID_LOG_TAGS=''; exec logcat ARGS` (older clients quote
# the empty value in double quotes): the prefix is adb's own, the rest is checked as a command.
_LOGCAT_PREFIX = re.compile(r"""export ANDROID_LOG_TAGS=(?:''|"''"|""); exec (?=logcat(?: |$))""")
_SHELL_OPTION = re.compile(r"v2|raw|pty|TERM=[A-Za-z0-9._+-]{1,64}")
# Services that change adbd itself or the device's state: the owner's (``full``) alone.
_ADBD_CONTROL = frozenset({
    "reboot", "root", "unroot", "remount", "tcpip", "usb", "enable-verity", "disable-verity",
    "sideload", "sideload-host", "backup", "restore",
})
_FORWARD_TARGET = re.compile(r"tcp:(?:localhost:)?\d{1,5}|localabstract:[A-Za-z0-9._@/:-]{1,107}")
_INSTALL_FLAGS = frozenset({"-r", "-R", "-t", "-d"})
# What begins an install (a streamed one, or a session install-multiple fills).
_INSTALL_STARTS = ("install", "install-create")
_INSTALL_SESSION = re.compile(r"\d{1,10}")
_SPLIT_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")
_SYNC_READS = frozenset({"STAT", "LST2", "STA2", "LIST", "LIS2"})


@dataclass(frozen=True, slots=True)
class TunnelOpen:
    """A tunnel ``OPEN`` the policy let through: what to open on the device (the checked,
    re-quoted command, never the client's text) and how the bridge relays it (``sync``: every
    request's path checked; ``raw``: bytes as they come)."""

    service: str
    kind: str = "raw"
    installs: bool = False  # ends an install (``install`` or ``install-commit``)


def _size_arg(argv: Sequence[str], value: str) -> None:
    if not re.fullmatch(r"\d{1,12}", value) or int(value) > 4 << 30:
        bad_arg(argv, "-S takes a size in bytes")


def _install_command(argv: list[str], *, owner: bool) -> None:
    """``cmd package install|install-create|install-write|install-commit|install-abandon``
    as ``adb install`` and ``adb install-multiple`` send them (APK bytes on stdin)."""
    verb, args = argv[2], argv[3:]
    if verb in ("install", "install-create"):
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "-S" and i + 1 < len(args):
                _size_arg(argv, args[i + 1])
                i += 2
                continue
            if arg == "-p" and i + 1 < len(args) and PACKAGE.fullmatch(args[i + 1]):
                i += 2  # a split of an installed package (install-multiple -p)
                continue
            if arg not in _INSTALL_FLAGS and not (owner and arg == "-g"):
                bad_arg(argv, f"install option {arg!r} is not allowed")
            i += 1
        if verb == "install" and "-S" not in args:
            bad_arg(argv, "a streamed install names its size (-S)")
        return
    if verb == "install-write":
        if (len(args) != 5 or args[0] != "-S" or not _INSTALL_SESSION.fullmatch(args[2])
                or not _SPLIT_NAME.fullmatch(args[3]) or args[4] != "-"):
            bad_arg(argv, "expected `install-write -S SIZE SESSION NAME -`")
        _size_arg(argv, args[1])
        return
    if len(args) != 1 or not _INSTALL_SESSION.fullmatch(args[0]):
        bad_arg(argv, f"expected `{verb} SESSION`")


def _tunnel_command(policy: Policy, serial: str, command: str,
                    context: CommandContext | None) -> list[str]:
    """A tunnel shell/exec command: adb's own install and logcat forms, else the shell check."""
    stripped = _LOGCAT_PREFIX.sub("", command, count=1) if command.startswith("export ") else command
    argv = parse_command(stripped)
    profile = policy.profile_for(serial)
    if argv[0] == "logcat" and profile is not Profile.FULL:
        # A tunnel's stream may follow the log (as the logcat stream does), so no -d is needed;
        # the options are the allow-list's. A logcat read, not a shell: no-shell allows it,
        # instrument-only (the app's processes only, which adb's logcat cannot filter) not.
        policy.check_logcat(serial, context)
        check_denied(argv)
        validate_logcat([*argv, "-d"], context or CommandContext())
        return argv
    if argv[:2] == ["cmd", "package"] and len(argv) >= 3 and argv[2] in (
            "install", "install-create", "install-write", "install-commit", "install-abandon"):
        policy.check_install(serial)
        _install_command(argv, owner=policy.profile_for(serial) is Profile.FULL)
        if argv[2] in _INSTALL_STARTS and not policy.of_owner:
            # pm replaces an installed package by default (``-r`` changes nothing since
            # Android 7): anyone but the owner installs with ``-R``, so the owner's apps (and
            # anything already there) are never replaced; adb prints pm's failure.
            argv = [*argv[:3], "-R", *argv[3:]]
        return argv
    return policy.check_shell(serial, argv, context)


def _installs(argv: list[str]) -> bool:
    return argv[:2] == ["cmd", "package"] and argv[2] in ("install", "install-commit")


def check_tunnel_service(policy: Policy, serial: str, service: str,
                  context: CommandContext | None) -> TunnelOpen:
    profile = policy.check_exposed(serial)
    head, sep, rest = service.partition(":")
    name = head.split(",", 1)[0]
    if name == "shell" and sep:
        options = head.split(",")[1:]
        if any(not _SHELL_OPTION.fullmatch(o) for o in options):
            refuse(Rule.SERVICE_NOT_ALLOWED, f"unknown shell option in {head!r}")
        if not rest.strip():
            if profile is not Profile.FULL:
                refuse(Rule.INTERACTIVE_SHELL,
                        f"an interactive shell is not available on profile {profile.value}: "
                        "run one command at a time (adb shell CMD)", profile=profile.value)
            return TunnelOpen(service)
        argv = _tunnel_command(policy, serial, rest, context)
        return TunnelOpen(f"{head}:{shlex.join(argv)}", installs=_installs(argv))
    if name == "exec" and sep and head == "exec":
        argv = _tunnel_command(policy, serial, rest, context)
        return TunnelOpen(f"exec:{shlex.join(argv)}", installs=_installs(argv))
    if service == "sync:":
        policy._not_in(serial, Rule.PUSH_NOT_ALLOWED, "file transfer", Profile.INSTRUMENT_ONLY)
        return TunnelOpen(service, "sync")
    if _FORWARD_TARGET.fullmatch(service):
        policy._not_in(serial, Rule.FORWARD_NOT_ALLOWED, "port forwards", Profile.INSTRUMENT_ONLY)
        return TunnelOpen(service)
    if service in ("jdwp", "track-jdwp") or re.fullmatch(r"jdwp:\d{1,10}", service):
        policy._not_in(serial, Rule.FORWARD_NOT_ALLOWED, "debugger connections",
                       Profile.INSTRUMENT_ONLY)
        return TunnelOpen(service)
    if service == "framebuffer:":
        policy.check_screenshot(serial)
        return TunnelOpen(service)
    if name == "reverse":
        refuse(Rule.REVERSE_NOT_CARRIED,
                "adb reverse is not carried by a tunnel: the device's connections would reach "
                "the bridge's host, not yours")
    if name in _ADBD_CONTROL:
        if profile is Profile.FULL:
            return TunnelOpen(service)
        refuse(Rule.ADBD_CONTROL,
                f"{name}: refused on a shared device (profile {profile.value})",
                profile=profile.value)
    refuse(Rule.SERVICE_NOT_ALLOWED, f"adb service {name[:40]!r} is not carried by a tunnel")


def check_sync_request(policy: Policy, serial: str, request: str, path: str) -> None:
    if request == "SEND":
        policy.check_push(serial, path.rpartition(",")[0] if "," in path else path)
    elif request == "RECV":
        policy.check_pull(serial, path)
    elif request in _SYNC_READS:
        profile = policy._not_in(serial, Rule.PULL_NOT_ALLOWED, "file listing",
                                 Profile.INSTRUMENT_ONLY)
        if profile is not Profile.FULL:
            in_workspace(path, allow_root=True)
    else:
        refuse(Rule.SERVICE_NOT_ALLOWED, f"sync request {request[:8]!r} is not carried")

