"""Every timing and limit of droidwire, in one frozen object (docs/design.md §4.9; each default is defined once).

Each default is defined exactly once, here; code and docs read it from :data:`DEFAULTS` or
from a :class:`Settings` handed down by the CLI. ``None`` means "off" where a field allows it.

Timings are fields whose names end in ``_s`` (seconds). :meth:`Settings.scaled` multiplies
every timing, never a limit, so a test can run the whole system ten or a hundred times faster::

    fast = DEFAULTS.scaled(0.01)          # 10 s ping interval -> 0.1 s; frame cap unchanged

The module also holds the two pure pieces of the reconnect policy (docs/design.md §4.2, §4.5) that
the bridge's connection loop uses: :func:`backoff` (a delay generator with full jitter and a
cap, taking its random source) and :class:`ReconnectBudget` (time passed in, no clock reads).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULTS",
    "MIB",
    "ReconnectBudget",
    "Settings",
    "backoff",
]

MIB = 1024 * 1024

_TIMING = {"timing": True}


def _t(default: float | None) -> Any:
    """A timing field: scaled by :meth:`Settings.scaled`."""
    return field(default=default, metadata=_TIMING)


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """Every timing (seconds) and limit. Build variants with :func:`dataclasses.replace`."""

    # Keepalive: the transport library's own ping/pong, same values on both ends (§4.1).
    ping_interval_s: float | None = _t(10.0)
    ping_timeout_s: float | None = _t(10.0)
    close_timeout_s: float = _t(2.0)
    # Handshake: from TCP connect until ``welcome`` (an opened-then-silent server is a failure).
    handshake_timeout_s: float = _t(10.0)

    # Reconnect (§4.2, §4.5). First retry after a session that reached ``welcome`` comes
    # within ``backoff_first_max_s``; failing attempts then wait a full-jittered
    # ``min(cap, base * factor**n)``.
    reconnect_budget_s: float = _t(30 * 60.0)
    backoff_first_max_s: float = _t(0.5)
    backoff_base_s: float = _t(1.0)
    backoff_factor: float = 2.0
    backoff_cap_s: float = _t(60.0)

    # RPC.
    rpc_timeout_s: float = _t(60.0)  # default deadline of an RPC
    rpc_long_timeout_s: float = _t(15 * 60.0)  # compile, install, instrument
    grace_period_s: float = _t(30.0)  # a call waits this long for a reconnecting bridge (§4.7)
    liveness_interval_s: float = _t(15.0)  # app-level ping when idle and silent (§4.6)
    liveness_missed_max: int = 3  # unanswered liveness pings before the bridge counts as dead
    handler_concurrency: int = 16  # RPC handlers running at once on a bridge

    # Cluster mode (controller replicas on Redis, docs/cluster.md): a replica renews its own
    # liveness key and its bridges' ownership every heartbeat; a dead replica's keys expire
    # after the TTL, so its bridges leave cluster-wide listings on their own.
    cluster_heartbeat_s: float = _t(2.0)
    cluster_ttl_s: float = _t(6.0)

    # Streams (logcat).
    logcat_batch_lines: int = 100  # lines per ``evt`` frame
    logcat_flush_s: float = _t(0.025)  # a partial batch is sent after this long
    stream_queue_batches: int = 256  # batches queued per subscription before lines are dropped (a 10,000-line burst fits)
    stream_reauth_s: float = _t(5.0)  # a user's live stream re-checks its authorization (a loan may end)
    send_queue_frames: int = 256  # frames queued per connection before senders wait

    # Limits.
    max_frame_bytes: int = 16 * MIB  # a screenshot PNG of a few MB fits
    outbox_max: int = 1024  # results held for the controller's ack, oldest evicted beyond
    finished_ttl_s: float = _t(60 * 60.0)  # how long a bridge remembers a finished id
    finished_max: int = 10_000  # and how many it remembers at most

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.name in ("ping_interval_s", "ping_timeout_s"):
                continue
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise TypeError(f"setting {f.name} must be a number, not {value!r}")
            if value <= 0:
                raise ValueError(f"setting {f.name} must be positive, got {value!r}")
        if self.backoff_factor < 1:
            raise ValueError("setting backoff_factor must be >= 1")

    def scaled(self, factor: float) -> Settings:
        """A copy with every timing (``*_s`` field) multiplied by ``factor``; limits unchanged."""
        if factor <= 0:
            raise ValueError(f"scale factor must be positive, got {factor!r}")
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.metadata.get("timing"):
                value = getattr(self, f.name)
                changes[f.name] = None if value is None else value * factor
        return dataclasses.replace(self, **changes)

    def timings(self) -> dict[str, float | None]:
        """The timing fields by name (for docs and logs)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.metadata.get("timing")
        }


DEFAULTS = Settings()


def backoff(
    settings: Settings, random: Callable[[], float], *, quick_first: bool = True
) -> Iterator[float]:
    """Reconnect delays in seconds, forever: full jitter under an exponential cap.

    ``random`` returns a float in [0, 1) (``random.Random(seed).random`` in tests).
    With ``quick_first`` (the previous session reached ``welcome``) the first delay is under
    ``backoff_first_max_s``. Then attempt ``n`` (0-based) waits ``U(0, min(cap, base*factor**n))``.

    Use one generator per outage: create it when a session that reached ``welcome`` drops,
    and keep drawing from it while attempts fail, *including* connections that opened and
    closed before ``welcome``, so a server that accepts-then-closes is not hammered (the trap
    of resetting on every opened connection).
    """
    if quick_first:
        yield random() * settings.backoff_first_max_s
    ceiling = settings.backoff_base_s
    while True:
        yield random() * min(settings.backoff_cap_s, ceiling)
        if ceiling < settings.backoff_cap_s:
            ceiling *= settings.backoff_factor


@dataclass(slots=True)
class ReconnectBudget:
    """The reconnect budget clock (§4.2), counted from the first failure, time passed in.

    ``failed(now)`` at each failure (only the first one starts the clock); ``reset()`` on every
    ``welcome``; ``exhausted(now)`` tells the loop to give up and exit non-zero.
    """

    budget_s: float
    first_failure: float | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> ReconnectBudget:
        return cls(budget_s=settings.reconnect_budget_s)

    def failed(self, now: float) -> None:
        if self.first_failure is None:
            self.first_failure = now

    def reset(self) -> None:
        self.first_failure = None

    def elapsed(self, now: float) -> float:
        return 0.0 if self.first_failure is None else max(0.0, now - self.first_failure)

    def remaining(self, now: float) -> float:
        return max(0.0, self.budget_s - self.elapsed(now))

    def exhausted(self, now: float) -> bool:
        return self.first_failure is not None and self.elapsed(now) >= self.budget_s
