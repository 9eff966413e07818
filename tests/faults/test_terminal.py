"""Terminal closes and the reconnect guard (device_bridge.connection, docs/design.md §3–4).

* 4400 / 4401 / 4403 / 4409 close codes and HTTP 401 / 403 at the handshake: the link raises
  ``LinkRefused`` after exactly one attempt (how long it took is a figure, not an assertion);
  the real ``droidwire bridge`` process exits non-zero after one attempt too.
* The reconnect guard: thousands of outages where the controller's close, a burst of error
  reports (``Link.drop``) and sometimes a transport abort arrive together, in random order.
  Never two connections at once, exactly one reconnect per outage.

The scripted controller peer is the one of the bridge's own tests (tests/device_bridge/test_connection).
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time

import pytest

from device_bridge.connection import Failure, Link, LinkRefused
from tests.adb_support import AdbServer
from tests.conftest import TIME_SCALE
from tests.device_bridge.test_connection import (
    Peer,
    PeerConn,
    Script,
    fast_settings,
    make_link,
    serve_forever,
)
from tests.faults.figures import FULL, record, size

AREA = "terminal closes and the reconnect guard"
WAIT = 20.0 * TIME_SCALE


async def _refused_after(link: Link) -> tuple[LinkRefused, float]:
    started = time.monotonic()
    with pytest.raises(LinkRefused) as info:
        async with asyncio.timeout(WAIT):
            await link.run(asyncio.Event())
    return info.value, time.monotonic() - started


async def test_terminal_closes_and_http_refusals_stop_after_one_attempt() -> None:
    times: list[float] = []
    extra_attempts = 0
    cases = 0
    for code in (4400, 4401, 4403, 4409):
        for after_welcome in (False, True):

            def script(n: int, code: int = code, after: bool = after_welcome) -> Script:
                async def run(conn: PeerConn) -> None:
                    await (conn.welcome() if after else conn.hello())
                    await conn.close(code, "refused by the fault suite")

                return run

            async with Peer(script) as peer:
                error, took = await _refused_after(make_link([peer.url]))
            assert error.close_code == code and error.exit_code != 0
            extra_attempts += peer.attempts - 1
            times.append(took)
            cases += 1
    for status in (401, 403):
        async with Peer(lambda n: serve_forever, refuse=lambda n, s=status: s) as peer:
            error, took = await _refused_after(make_link([peer.url]))
        assert error.http_status == status and error.exit_code != 0
        extra_attempts += peer.attempts - 1
        times.append(took)
        cases += 1
    record(AREA, "terminal refusals (4400/4401/4403/4409 × before/after welcome, HTTP 401/403)",
           cases)
    record(AREA, "  attempts after a terminal refusal", extra_attempts, must_be_zero=True)
    record(AREA, "  slowest stop after the refusal", round(max(times) * 1000, 1), unit="ms")
    assert extra_attempts == 0


@pytest.mark.skipif(not FULL, reason="full profile only: a process start is slow, and "
                    "tests/e2e covers the wrong-token exit of a bridge process in every run")
@pytest.mark.parametrize("status", [401, 4403])
async def test_the_bridge_process_exits_non_zero_after_one_attempt(
    status: int, adb_server: AdbServer
) -> None:
    """The real ``droidwire bridge`` process (its CLI, config and exit codes)."""

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            await conn.hello()
            await conn.close(status, "refused by the fault suite")

        return run

    refuse = (lambda n: status) if status < 1000 else (lambda n: None)
    async with Peer(script, refuse=refuse) as peer:
        env = {**os.environ, "DROIDWIRE_BRIDGE_TOKEN": "dw_b_fault-suite-not-real"}
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from droidwire import main; main()", "bridge",
            "--controller", peer.url.replace("ws://", "http://"), "--adb-port", str(adb_server.port),
            env={**env, **adb_server.env, "DROIDWIRE_BRIDGE_TOKEN": env["DROIDWIRE_BRIDGE_TOKEN"]}, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            async with asyncio.timeout(WAIT):
                output, _ = await proc.communicate()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        took = time.monotonic() - started
    text = output.decode(errors="replace")
    assert proc.returncode not in (0, None), text
    assert str(status) in text or ("unauthorized" in text.lower()), text
    assert "dw_b_fault-suite-not-real" not in text  # the token is never printed
    record(AREA, f"bridge process after {status}: attempts", peer.attempts)
    record(AREA, f"bridge process after {status}: extra attempts", peer.attempts - 1,
           must_be_zero=True)
    record(AREA, f"bridge process after {status}: exit code", proc.returncode or 0)
    record(AREA, f"bridge process after {status}: start to exit (incl. interpreter start)",
           round(took * 1000, 1), unit="ms")
    assert peer.attempts == 1


@pytest.mark.timeout(size(1800, 120))
async def test_error_and_close_races_never_make_two_connections() -> None:
    rounds = size(10_000, 200)
    rnd = random.Random(4409)
    holder: dict[str, Link] = {}
    recorded: list[int] = []
    stop = asyncio.Event()

    def script(n: int) -> Script:
        async def run(conn: PeerConn) -> None:
            await conn.welcome()
            if n >= rounds:
                stop.set()
                await conn.closed()
                return
            link = holder["link"]
            wins = 0

            async def report(delay: int) -> None:
                nonlocal wins
                for _ in range(delay):
                    await asyncio.sleep(0)
                if link.drop(Failure("simulated keepalive timeout")):
                    wins += 1

            async def close(delay: int) -> None:
                for _ in range(delay):
                    await asyncio.sleep(0)
                if rnd.random() < 0.2:
                    conn.ws.transport.abort()  # no close frame: 1006 on the bridge
                else:
                    await conn.close(rnd.choice([1000, 1001, 1011, 1012, 1013]), "race")

            jobs = [report(rnd.randrange(4)) for _ in range(rnd.randrange(1, 8))]
            jobs.insert(rnd.randrange(len(jobs) + 1), close(rnd.randrange(4)))
            await asyncio.gather(*jobs, return_exceptions=True)
            recorded.append(wins)

        return run

    settings = fast_settings(backoff_first_max_s=0.0005, backoff_base_s=0.001,
                             backoff_cap_s=0.002)
    async with Peer(script) as peer:
        link = make_link([peer.url], settings=settings)
        holder["link"] = link
        async with asyncio.timeout(WAIT + rounds * 0.05 * TIME_SCALE):
            await link.run(stop)
    extra = peer.attempts - (rounds + 1)
    record(AREA, "error + close races (outages)", rounds)
    record(AREA, "  connections made", link.connections)
    record(AREA, "  moments with two connections open", max(0, link.max_live - 1),
           must_be_zero=True)
    record(AREA, "  reconnects beyond one per outage", max(0, extra), must_be_zero=True)
    record(AREA, "  error reports recorded per connection (max)", max(recorded, default=0))
    assert not peer.errors
    assert link.max_live == 1
    assert peer.attempts == rounds + 1
    assert max(recorded, default=0) <= 1
