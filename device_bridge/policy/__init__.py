"""The host owner's command policy: what the controller may do with each device on this host.

docs/design.md §6, "defence in depth on the host": whatever the controller asks, the bridge owner's
local config decides which devices are exposed, under which **profile**, and can pause sharing
at once. A profile governs every RPC kind, not only shell:

================  ======================  ==================  ===========  ============  ===========
profile           shell                   logcat              screenshot,  install,      push / pull
                                                              UI           instrument
================  ======================  ==================  ===========  ============  ===========
standard          the allow-list below    all buffers         yes          APKs sent     droidwire
                                                                           through us    folder only
instrument-only   none                    the app under       no           yes           no
                                          test's processes
no-shell          none                    all buffers         yes          yes           as standard
agent             standard, plus any      all buffers         yes          no install    as standard
                  app's activity, no
                  ``pm clear``
full              anything without        all buffers         yes          yes           any path
                  metacharacters
================  ======================  ==================  ===========  ============  ===========

The droidwire folder is ``/data/local/tmp/droidwire/`` (:data:`DROIDWIRE_DIR`). Before any of
that, the owner's switches: while sharing is paused every check fails ``forbidden`` (rule
``paused``); a device the owner does not expose answers ``not_found`` (rule ``not_exposed``),
as if it were not attached.

Every check is one method of :class:`Policy` (``check_shell``, ``check_logcat``, ``check_push``…)
and refuses by raising ``RpcError(FORBIDDEN, message, {"rule": NAME, ...})``. The rule names
are part of the REST error (``rule``), so they are constants (``Rule``).

Shell commands are checked in three layers, the first two identical for every profile:

1. *Lexical screen* of the raw text (or of every argv element): no shell metacharacter
   (``; & | ` $ < > ( ) \\ * ? [ ] { } ~ ! #``), no control character (newline, NUL, tab…), no
   non-ASCII character that is whitespace, invisible, punctuation or a symbol, nor one whose NFKC
   form contains a metacharacter or a quote (fullwidth ``；``, the Greek question mark …); command
   names are plain ASCII. Then ``shlex`` splits it; an argument that still contains a quote after
   splitting was smuggling one and is refused.
2. *Deny list*: ``su``, ``reboot``, ``setprop``, ``dd``, ``chmod``/``chown``, any shell
   interpreter (``sh -c …``), wrappers that run another command (``env``, ``toybox``, ``xargs``,
   ``run-as``…), recursive ``rm`` of a system root. Refused in every profile, ``full`` included:
   the controller may be compromised, and these take a device away from its owner.
3. *Profile*: ``standard`` matches argv patterns with bounded arguments (``STANDARD``);
   ``agent`` the same patterns, except that ``am start -n`` may name any package's activity
   (an app from the launcher, a system settings screen) and ``pm clear`` (a wipe) is refused;
   ``full`` takes what passed 1 and 2; the others have no shell.

What reaches the device is always the normalised argv, re-quoted (``shlex.join``), never the
text the controller sent.

The package, one module per concern (this module re-exports the public names):

* :mod:`~device_bridge.policy.rules` the rule names and how a check refuses;
* :mod:`~device_bridge.policy.config` the owner's ``[policy]`` table;
  :mod:`~device_bridge.policy.context` what a check knows about the run;
* :mod:`~device_bridge.policy.lexical`, :mod:`~device_bridge.policy.denylist`,
  :mod:`~device_bridge.policy.allowlist` the three layers of the shell check;
* :mod:`~device_bridge.policy.paths` the droidwire folder and path confinement;
* :mod:`~device_bridge.policy.checks` :class:`Policy`, the switches and one check per RPC kind;
* :mod:`~device_bridge.policy.tunnel` the adb services a tunnel opens and its ``sync:`` requests.
"""

from __future__ import annotations

from device_bridge.policy.allowlist import (
    MAX_INPUT_TEXT,
    MAX_KEYEVENTS,
    MAX_LOGCAT_LINES,
    MAX_SWIPE_MS,
)
from device_bridge.policy.checks import Policy
from device_bridge.policy.config import PolicyConfig
from device_bridge.policy.context import CommandContext, LogcatScope
from device_bridge.policy.lexical import MAX_ARGS, MAX_COMMAND_CHARS, METACHARACTERS, parse_command
from device_bridge.policy.paths import DROIDWIRE_DIR
from device_bridge.policy.rules import Rule
from device_bridge.policy.tunnel import TunnelOpen
from protocol.envelope import Profile

__all__ = [
    "DROIDWIRE_DIR",
    "MAX_ARGS",
    "MAX_COMMAND_CHARS",
    "MAX_INPUT_TEXT",
    "MAX_KEYEVENTS",
    "MAX_LOGCAT_LINES",
    "MAX_SWIPE_MS",
    "METACHARACTERS",
    "CommandContext",
    "LogcatScope",
    "Policy",
    "PolicyConfig",
    "Profile",
    "Rule",
    "TunnelOpen",
    "parse_command",
]
