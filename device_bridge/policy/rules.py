"""The names of the policy's rules, and how a check refuses.

Every check refuses by raising ``RpcError(FORBIDDEN, message, {"rule": NAME, ...})``; the rule
names are part of the REST error (``rule``), a contract listed in docs/security.md.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, NoReturn

from protocol.errors import ErrorCode, RpcError

__all__ = ["Rule", "refuse"]


class Rule(StrEnum):
    """Names of the policy rules: the ``rule`` of a ``forbidden`` error (contract)."""

    # Host owner's switches.
    PAUSED = "paused"
    NOT_EXPOSED = "not_exposed"
    # Lexical screen (every profile).
    EMPTY_COMMAND = "empty_command"
    TOO_LONG = "too_long"
    METACHARACTER = "metacharacter"
    CONTROL_CHARACTER = "control_character"
    UNICODE_LOOKALIKE = "unicode_lookalike"
    NON_ASCII_COMMAND = "non_ascii_command"
    QUOTE = "quote"
    UNPARSEABLE = "unparseable"
    # Deny list (every profile).
    SU = "su"
    REBOOT = "reboot"
    SETPROP = "setprop"
    DD = "dd"
    CHMOD = "chmod"
    SHELL_INTERPRETER = "shell_interpreter"
    COMMAND_WRAPPER = "command_wrapper"
    RM_ROOT = "rm_root"
    ENV_ASSIGNMENT = "env_assignment"
    LOCK_SCREEN = "lock_screen"
    ADB_OFF = "adb_off"
    SIGNAL_INIT = "signal_init"
    # Profiles.
    SHELL_NOT_ALLOWED = "shell_not_allowed"
    NOT_ALLOWLISTED = "not_allowlisted"
    ARGUMENT = "argument"
    LOGCAT_FOLLOW = "logcat_follow"
    LOGCAT_COUNT = "logcat_count"
    SCREEN_UNKNOWN = "screen_unknown"
    OUTSIDE_SCREEN = "outside_screen"
    SWIPE_DURATION = "swipe_duration"
    TEXT_TOO_LONG = "text_too_long"
    PACKAGE_SCOPE = "package_scope"
    PACKAGE_PREEXISTING = "package_preexisting"
    PATH_OUTSIDE_WORKSPACE = "path_outside_workspace"
    PATH_INVALID = "path_invalid"
    LOGCAT_SCOPE = "logcat_scope"
    SCREENSHOT_NOT_ALLOWED = "screenshot_not_allowed"
    UI_NOT_ALLOWED = "ui_not_allowed"
    PUSH_NOT_ALLOWED = "push_not_allowed"
    PULL_NOT_ALLOWED = "pull_not_allowed"
    INSTALL_NOT_ALLOWED = "install_not_allowed"
    INSTRUMENT_NOT_ALLOWED = "instrument_not_allowed"
    WIPE_NOT_ALLOWED = "wipe_not_allowed"
    # adb services opened through a tunnel (docs/tunnel.md).
    SERVICE_NOT_ALLOWED = "service_not_allowed"
    INTERACTIVE_SHELL = "interactive_shell"
    ADBD_CONTROL = "adbd_control"
    REVERSE_NOT_CARRIED = "reverse_not_carried"
    FORWARD_NOT_ALLOWED = "forward_not_allowed"


def refuse(rule: Rule, message: str, **data: Any) -> NoReturn:
    raise RpcError(ErrorCode.FORBIDDEN, message, {"rule": rule.value, **data})
