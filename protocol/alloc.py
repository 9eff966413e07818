"""The C allocator of a process that relays bulk bytes: a tunnel's local end, the controller
and the bridge once they carry a tunnel (docs/tunnel.md).

glibc's ``malloc`` serves blocks from 128 KiB up with ``mmap`` until a freed one raises that
threshold, and gives the free top of its heap back to the kernel once it passes twice the
threshold. A relay allocates and frees megabyte buffers all the time (adb payloads, msgpack
frames, WebSocket frames and their masks, a few of each in flight): with those defaults most
of them are pages the kernel must fault in and zero again — measured, about two page faults
per relayed 4 KiB page in each relaying process, most of their system CPU on a push.
:func:`keep_freed_memory` fixes both thresholds so such blocks come from the heap and freed
ones are reused: at most :data:`TRIM_THRESHOLD` of free heap is kept past what is in use.
"""

from __future__ import annotations

import sys

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_freed_memory"]

MMAP_THRESHOLD = 8 << 20  # blocks up to this come from the heap (a 1 MiB frame and its copies)
TRIM_THRESHOLD = 32 << 20  # free heap kept for reuse before it goes back to the kernel
_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters
_M_MMAP_THRESHOLD = -3

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Once per process: the thresholds above (glibc only; elsewhere nothing). Whether set."""
    global _done
    if _done is None:
        _done = False
        if sys.platform.startswith("linux"):
            try:
                import ctypes  # imported here: a bridge that never carries a tunnel stays lean

                mallopt = ctypes.CDLL(None).mallopt
                _done = (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                         and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
            except (OSError, AttributeError):  # not glibc (musl has no such knob)
                pass
    return _done
