"""The :class:`Policy`: the host owner's switches, then one check per RPC kind.

Every check starts with the owner's switches (:meth:`Policy.check_exposed`): while sharing is
paused every check fails ``forbidden`` (rule ``paused``); a device the owner does not expose
answers ``not_found`` (rule ``not_exposed``), as if it were not attached. Then the device's
profile decides (the table in :mod:`device_bridge.policy`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from device_bridge.policy.allowlist import (
    AGENT,
    COMPONENT,
    LOGCAT_RPC_BUFFERS,
    STANDARD,
    not_preexisting,
    own_package,
)
from device_bridge.policy.config import PolicyConfig
from device_bridge.policy.context import CommandContext, LogcatScope
from device_bridge.policy.denylist import check_denied
from device_bridge.policy.lexical import parse_command
from device_bridge.policy.paths import transfer_path
from device_bridge.policy.rules import Rule, refuse
from device_bridge.policy.tunnel import (
    TunnelOpen,
    check_sync_request,
    check_tunnel_service,
)
from protocol.envelope import Profile
from protocol.errors import ErrorCode, RpcError

__all__ = ["Policy"]


class Policy:
    """The host owner's policy, applied to every request whatever the controller asks.

    ``paused`` can be flipped at run time (``pause()`` / ``resume()``) besides the config's
    ``paused`` and ``pause_file``.
    """

    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()
        self._paused = self.config.paused
        self._base: Policy | None = None  # set on a caller's view (for_caller)
        self._cap_full = False

    def for_caller(self, *, as_owner: bool) -> Policy:
        """This policy as it applies to one caller: ``full`` is for the bridge owner's own
        use, so for anyone else (a borrower, an admin, a caller the controller did not vouch
        for) a ``full`` device answers as ``standard``. The view shares the owner's switches
        (pause, exposure) with this policy."""
        base = self._base or self
        if as_owner:
            return base
        view = Policy.__new__(Policy)
        view.config = base.config
        view._paused = False
        view._base = base
        view._cap_full = True
        return view

    @property
    def of_owner(self) -> bool:
        """Whether this is the policy as it applies to the device's owner (not a caller's
        view from :meth:`for_caller`)."""
        return self._base is None

    # -- host owner's switches ---------------------------------------------------------------

    @property
    def paused(self) -> bool:
        if self._base is not None:
            return self._base.paused
        pause_file = self.config.pause_file
        return self._paused or (pause_file is not None and os.path.exists(pause_file))

    def pause(self) -> None:
        if self._base is not None:
            self._base.pause()
        self._paused = True

    def resume(self) -> None:
        """Lift the run-time pause (a ``pause_file`` that exists still pauses)."""
        if self._base is not None:
            self._base.resume()
        self._paused = False

    def is_exposed(self, serial: str) -> bool:
        """Whether the device may be shown to the controller at all (no pause check)."""
        if serial in self.config.hide:
            return False
        return self.config.expose is None or serial in self.config.expose

    def profile_for(self, serial: str) -> Profile:
        profile = self.config.devices.get(serial, self.config.profile)
        if profile is Profile.FULL and self._cap_full:
            return Profile.STANDARD  # full is the owner's own (for_caller)
        return profile

    def check_exposed(self, serial: str) -> Profile:
        """Every check starts here: paused → ``forbidden``; a hidden device → ``not_found``.

        A device the owner does not expose answers as if it were not attached, so the
        controller learns nothing about it.
        """
        if self.paused:
            refuse(Rule.PAUSED, "the host owner has paused sharing of this host's devices")
        if not self.is_exposed(serial):
            raise RpcError(
                ErrorCode.NOT_FOUND, f"no device {serial!r}", {"rule": Rule.NOT_EXPOSED.value}
            )
        return self.profile_for(serial)

    # -- one check per RPC kind --------------------------------------------------------------

    def check_shell(
        self,
        serial: str,
        command: str | Sequence[str],
        context: CommandContext | None = None,
    ) -> list[str]:
        """Return the normalised argv to run, or raise ``forbidden`` naming the rule."""
        profile = self.check_exposed(serial)
        if profile in (Profile.INSTRUMENT_ONLY, Profile.NO_SHELL):
            refuse(
                Rule.SHELL_NOT_ALLOWED,
                f"profile {profile.value} has no shell",
                profile=profile.value,
            )
        argv = parse_command(command)
        check_denied(argv)
        if profile is Profile.FULL:
            return argv
        table = AGENT if profile is Profile.AGENT else STANDARD
        validator = table.get(argv[0])
        if validator is None:
            refuse(Rule.NOT_ALLOWLISTED, f"{argv[0]!r} is not on the {profile.value} allow-list")
        validator(argv, context or CommandContext())
        return argv

    def check_logcat(
        self,
        serial: str,
        context: CommandContext | None = None,
        *,
        buffers: Iterable[str] = ("main",),
    ) -> LogcatScope:
        """Which lines a logcat read (dump or follow) may return."""
        profile = self.check_exposed(serial)
        unknown = set(buffers) - LOGCAT_RPC_BUFFERS
        if unknown:
            refuse(Rule.ARGUMENT, f"unknown logcat buffer(s) {sorted(unknown)}")
        if profile is not Profile.INSTRUMENT_ONLY:
            return LogcatScope()
        packages = frozenset(p for p in (context or CommandContext()).packages)
        if not packages:
            refuse(
                Rule.LOGCAT_SCOPE,
                "profile instrument-only shows only the app under test's logs: name the app",
                profile=profile.value,
            )
        return LogcatScope(packages=packages)

    def check_screenshot(self, serial: str) -> None:
        self._not_in(serial, Rule.SCREENSHOT_NOT_ALLOWED, "screenshots", Profile.INSTRUMENT_ONLY)

    def check_ui(self, serial: str) -> None:
        """UI reads and actions of the agent toolkit (tap, swipe, text, key, ui dump)."""
        self._not_in(serial, Rule.UI_NOT_ALLOWED, "UI access", Profile.INSTRUMENT_ONLY)

    def check_install(self, serial: str) -> None:
        """Install of APK bytes sent through droidwire (the only install the bridge offers);
        never under ``agent``."""
        self._not_in(serial, Rule.INSTALL_NOT_ALLOWED, "installs", Profile.AGENT)

    def check_uninstall(
        self, serial: str, package: str, context: CommandContext | None = None
    ) -> None:
        profile = self.check_exposed(serial)
        if profile is not Profile.FULL:
            own_package(package, context or CommandContext())
            not_preexisting(package, context or CommandContext())

    def check_instrument(
        self, serial: str, component: str, context: CommandContext | None = None
    ) -> None:
        """``am instrument`` of ``PACKAGE/RUNNER``: the run's test package unless ``full``."""
        profile = self.check_exposed(serial)
        match = COMPONENT.fullmatch(component)
        if match is None:
            refuse(Rule.ARGUMENT, f"{component!r} is not a PACKAGE/RUNNER component")
        if profile is not Profile.FULL:
            own_package(match["pkg"], context or CommandContext())

    def check_push(self, serial: str, path: str) -> str:
        """Return the normalised device path a push may write."""
        return self._transfer(serial, path, Rule.PUSH_NOT_ALLOWED, "push")

    def check_pull(self, serial: str, path: str) -> str:
        """Return the normalised device path a pull may read."""
        return self._transfer(serial, path, Rule.PULL_NOT_ALLOWED, "pull")

    def check_tunnel(
        self, serial: str, service: str, context: CommandContext | None = None
    ) -> TunnelOpen:
        """An adb service a tunnel opens (``shell,v2,raw:CMD``, ``sync:``, ``tcp:PORT`` …):
        what to open on the device, or ``forbidden`` naming the rule (docs/tunnel.md)."""
        return check_tunnel_service(self, serial, service, context)

    def check_sync(self, serial: str, request: str, path: str) -> None:
        """One request on a tunnel's ``sync:`` stream (``SEND``, ``RECV``, ``STAT`` …): its
        path confined as pushes and pulls are."""
        check_sync_request(self, serial, request, path)

    # -- helpers -----------------------------------------------------------------------------

    def _not_in(self, serial: str, rule: Rule, what: str, *profiles: Profile) -> Profile:
        profile = self.check_exposed(serial)
        if profile in profiles:
            refuse(rule, f"profile {profile.value} allows no {what}", profile=profile.value)
        return profile

    def _transfer(self, serial: str, path: str, rule: Rule, what: str) -> str:
        profile = self._not_in(serial, rule, what, Profile.INSTRUMENT_ONLY)
        return transfer_path(path, anywhere=profile is Profile.FULL)
