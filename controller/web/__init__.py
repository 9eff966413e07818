"""The web dashboard (docs/design.md §6): server-rendered pages at ``/``.

Sign in once with a token (``POST /login`` → an HttpOnly, SameSite=Strict session cookie;
:mod:`controller.web.sessions`; sessions are kept hashed in the store, so they survive a
restart and work on every cluster replica), then: devices (state, owner, lent to, battery, Android
version), runs (verdict, device, timings), a run (step log with every RPC including refused
ones, compile rounds with diffs, per-test results, logcat with the evidence highlighted) and
a device's live logcat tail over a same-origin WebSocket (:mod:`controller.web.pages`); loans
(lend, extend, revoke) and the audit log (:mod:`controller.web.manage_pages`); what every page
shares (headers, sign-in, forms) is :mod:`controller.web.common`.
Everything is served by the controller itself, CSS and JS included: it works offline.
"""

from __future__ import annotations

from controller.web.common import sessions_of
from controller.web.pages import router
from controller.web.sessions import COOKIE_NAME, SessionStore

__all__ = ["COOKIE_NAME", "SessionStore", "router", "sessions_of"]
