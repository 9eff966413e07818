"""What every planner prompt and the verifier's say about the screen they are shown.

:data:`PAGE_RULES` — page awareness: act on the page the ``[Device State]`` block names, and
expect the page each step leads to; :data:`OVERLAY_WARNING` — the magenta crosshairs and
numbers of a marked screenshot are droidwire's overlay (Set-of-Marks), never the app's UI.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["OVERLAY_WARNING", "PAGE_RULES", "elements_text"]

PAGE_RULES = """Page awareness:
- The [Device State] block names the app and the page (Activity) on screen now, and the pages
  visited before it. Plan from that page: use only elements listed as on screen now, or ones a
  previous step of your plan will bring up.
- If the page is not the one the goal needs, first navigate there (start the app, tap the way
  there, or go back), and give each navigating step an "expect" naming the page it leads to.
- Never assume a step worked: the next observation tells. If the page did not change as
  expected, plan from the page you are on, not from the one you wanted.
- A keyboard on screen covers the lower part of the page; go back to hide it before tapping
  what it covers."""

OVERLAY_WARNING = (
    "Magenta (#FF00B4) crosshairs with numbers on a marked screenshot are droidwire's "
    "overlay (Set-of-Marks: the number is the element's index), not part of the app's UI: "
    "never report them as app content and never tap them for what they look like."
)


def elements_text(elements: Sequence[Mapping[str, Any]], limit: int = 80) -> str:
    """The on-screen elements, one line each: ``[index] Class 'label' flags``."""
    rows = []
    for e in elements[:limit]:
        label = str(e.get("text") or e.get("desc") or e.get("resource_id") or "")[:80]
        if not label and not e.get("actionable"):
            continue
        kind = str(e.get("class_name", "")).rsplit(".", 1)[-1]
        flags = ",".join(f for f in ("clickable", "checked", "focused") if e.get(f))
        rows.append(f"[{e.get('index')}] {kind} {label!r} {flags}".rstrip())
    return "\n".join(rows) or "(no elements)"
