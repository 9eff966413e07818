"""Path confinement: the one device folder a borrower may touch, and what a transfer may name.

A borrower's paths (push, pull, a tunnel's ``sync:`` requests, ``ls``/``rm``, uiautomator
dumps) are normalised and must lie inside :data:`DROIDWIRE_DIR` (``..`` cannot escape); the
owner's ``full`` profile takes any absolute path.
"""

from __future__ import annotations

import posixpath

from device_bridge.policy.rules import Rule, refuse

__all__ = ["DROIDWIRE_DIR", "MAX_PATH_BYTES", "in_workspace", "transfer_path"]

# The one device folder a borrower may touch (push/pull, ls/rm, uiautomator dumps).
DROIDWIRE_DIR = "/data/local/tmp/droidwire"
# The sync protocol's limit on a path.
MAX_PATH_BYTES = 1024


def in_workspace(path: str, *, allow_root: bool) -> str:
    """Normalise ``path`` and require it inside the droidwire folder (``..`` cannot escape)."""
    if not path.startswith("/"):
        refuse(Rule.PATH_INVALID, f"path {path!r} must be absolute")
    # normpath keeps a leading '//' (POSIX allows it to mean something else): collapse it.
    normal = posixpath.normpath("/" + path.lstrip("/"))
    if normal == DROIDWIRE_DIR and allow_root:
        return normal
    if not normal.startswith(DROIDWIRE_DIR + "/"):
        refuse(
            Rule.PATH_OUTSIDE_WORKSPACE,
            f"path {path!r} is outside {DROIDWIRE_DIR}/",
            path=normal,
        )
    return normal



def transfer_path(path: str, *, anywhere: bool) -> str:
    """The normalised device path a push or pull names: absolute, without control characters,
    within the sync protocol's limit, and inside the droidwire folder unless ``anywhere``
    (the owner's ``full`` profile)."""
    if not isinstance(path, str) or not path:
        refuse(Rule.PATH_INVALID, "empty path")
    for ch in path:
        code = ord(ch)
        if code < 0x20 or code == 0x7F:
            refuse(Rule.CONTROL_CHARACTER, f"control character U+{code:04X} in path")
    if len(path.encode("utf-8")) > MAX_PATH_BYTES:
        refuse(Rule.PATH_INVALID, f"path longer than {MAX_PATH_BYTES} bytes")
    if anywhere:
        if not path.startswith("/"):
            refuse(Rule.PATH_INVALID, f"path {path!r} must be absolute")
        return posixpath.normpath("/" + path.lstrip("/"))
    return in_workspace(path, allow_root=False)
