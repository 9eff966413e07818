"""Layer 1 of the shell check, the same for every profile: the lexical screen and the split.

No shell metacharacter, no control character, no non-ASCII character that may pass for shell
syntax, plain ASCII command names; then ``shlex`` splits the text, and an argument that still
holds a quote was smuggling one.
"""

from __future__ import annotations

import shlex
import unicodedata
from collections.abc import Sequence

from device_bridge.policy.rules import Rule, refuse

__all__ = ["MAX_ARGS", "MAX_COMMAND_CHARS", "METACHARACTERS", "parse_command"]


# Characters a POSIX/mksh shell gives a meaning to outside quotes. Newline and the other control
# characters are refused by their own rule.
METACHARACTERS = frozenset(";&|`$<>()\\*?[]{}~!#")
_QUOTES = frozenset("'\"")

MAX_COMMAND_CHARS = 4096
MAX_ARGS = 64


def _screen_char(ch: str, *, in_command_name: bool) -> None:
    code = ord(ch)
    if code < 0x20 or code == 0x7F or 0x80 <= code < 0xA0:
        refuse(Rule.CONTROL_CHARACTER, f"control character U+{code:04X} in command")
    if ch in METACHARACTERS:
        refuse(Rule.METACHARACTER, f"shell metacharacter {ch!r} in command", char=ch)
    if code < 0x80:
        return
    if in_command_name:
        refuse(Rule.NON_ASCII_COMMAND, f"non-ASCII character U+{code:04X} in a command name")
    folded = unicodedata.normalize("NFKC", ch)
    category = unicodedata.category(ch)
    if (
        any(c in METACHARACTERS or c in _QUOTES or ord(c) < 0x20 for c in folded)
        or category[0] in "PSZC"  # punctuation, symbols, separators, format/control/unassigned
    ):
        refuse(
            Rule.UNICODE_LOOKALIKE,
            f"character U+{code:04X} ({unicodedata.name(ch, 'unnamed')}) may pass for shell syntax",
        )


def _screen_text(text: str) -> None:
    """Screen raw command text; command names are checked after splitting."""
    for ch in text:
        _screen_char(ch, in_command_name=False)


def _screen_argv(argv: Sequence[str]) -> None:
    for index, arg in enumerate(argv):
        if not isinstance(arg, str):
            refuse(Rule.UNPARSEABLE, "argv elements must be strings")
        for ch in arg:
            _screen_char(ch, in_command_name=index == 0)
        if _QUOTES.intersection(arg):
            refuse(Rule.QUOTE, f"quote character inside argument {index}")


def parse_command(command: str | Sequence[str]) -> list[str]:
    """Screen and split a command (layer 1); returns its argv or raises ``forbidden``.

    A string is split with ``shlex`` (POSIX rules); an argv is taken as given. Either way every
    element passes the same screen, so quoting cannot hide a metacharacter and a quote inside
    an argument (what remains of smuggling) is refused.
    """
    if isinstance(command, str):
        if len(command) > MAX_COMMAND_CHARS:
            refuse(Rule.TOO_LONG, f"command longer than {MAX_COMMAND_CHARS} characters")
        _screen_text(command)
        try:
            argv = shlex.split(command, comments=False, posix=True)
        except ValueError as exc:
            refuse(Rule.UNPARSEABLE, f"cannot parse command: {exc}")
    else:
        argv = list(command)
        if sum(len(a) if isinstance(a, str) else 0 for a in argv) > MAX_COMMAND_CHARS:
            refuse(Rule.TOO_LONG, f"command longer than {MAX_COMMAND_CHARS} characters")
    if not argv or not argv[0]:
        refuse(Rule.EMPTY_COMMAND, "empty command")
    if len(argv) > MAX_ARGS:
        refuse(Rule.TOO_LONG, f"more than {MAX_ARGS} arguments")
    _screen_argv(argv)
    return argv

