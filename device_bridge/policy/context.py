"""What a check knows about the run a command belongs to, and what a logcat read may return."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CommandContext", "LogcatScope"]


@dataclass(frozen=True, slots=True)
class CommandContext:
    """What the bridge knows about the run a command belongs to.

    ``installed_packages`` are the packages this bridge installed through droidwire (still
    installed); ``preexisting`` those of them that were on the device before (droidwire
    updated them): they may be started and instrumented, never cleared or uninstalled.
    ``screen`` is the device's screen size (width, height), for ``input`` bounds.
    """

    app_package: str | None = None
    test_package: str | None = None
    installed_packages: frozenset[str] = frozenset()
    preexisting: frozenset[str] = frozenset()
    screen: tuple[int, int] | None = None

    @property
    def packages(self) -> frozenset[str]:
        """Packages a borrower may start, stop, clear and instrument."""
        own = {p for p in (self.app_package, self.test_package) if p}
        return frozenset(own) | self.installed_packages


@dataclass(frozen=True, slots=True)
class LogcatScope:
    """What a logcat read may return: everything, or only the lines of these packages' processes."""

    packages: frozenset[str] | None = None  # None: every line

    @property
    def unrestricted(self) -> bool:
        return self.packages is None

