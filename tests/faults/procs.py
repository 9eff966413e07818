"""Processes the fault suite kills: a controller (``python -m tests.faults.procs controller``:
the real runner, ``droidwire.serve.run``, with the suite's test-scaled settings) and
helpers to start, SIGKILL and restart it on the same port and database."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

import httpx

from tests.conftest import TIME_SCALE

__all__ = ["ControllerProcess"]

WAIT_S = 30.0 * TIME_SCALE
START_S = 120.0 * TIME_SCALE


class ControllerProcess:
    """A controller in a process of its own, on a fixed port and database across restarts."""

    def __init__(self, port: int, db_url: str, token: str, log_path: Path) -> None:
        self.port = port
        self.db_url = db_url
        self.token = token
        self.log_path = log_path
        self.url = f"http://127.0.0.1:{port}"
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0

    async def start(self) -> None:
        env = {**os.environ, "DROIDWIRE_BOOTSTRAP_TOKEN": self.token}
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tests.faults.procs", "controller", str(self.port),
                self.db_url, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
            )
        self.starts += 1
        await self.wait_ready()

    async def wait_ready(self) -> None:
        """Until /healthz answers 200 (bounded: a loaded machine takes seconds just to import
        the controller); fails at once if the process died."""
        async with httpx.AsyncClient(base_url=self.url, timeout=2.0) as http:
            async with asyncio.timeout(START_S):
                while True:
                    assert self.proc is not None
                    if self.proc.returncode is not None:
                        raise AssertionError(f"controller exited {self.proc.returncode}: "
                                             f"{self.log_path.read_text()[-2000:]}")
                    with contextlib.suppress(httpx.TransportError):
                        if (await http.get("/healthz")).status_code == 200:
                            return
                    await asyncio.sleep(0.02)

    async def kill9(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        await asyncio.wait_for(self.proc.wait(), WAIT_S)

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), WAIT_S)
        except TimeoutError:
            await self.kill9()


def _controller(port: int, db_url: str) -> int:
    from controller.config import ControllerConfig
    from droidwire.serve import run
    from tests.faults.timing import SETTINGS

    config = ControllerConfig(host="127.0.0.1", port=port, db_url=db_url,
                              bootstrap_token=os.environ["DROIDWIRE_BOOTSTRAP_TOKEN"],
                              settings=SETTINGS, graceful_shutdown_s=1)
    return 0 if run(config, log_level="warning") else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "controller":
        sys.exit(_controller(int(sys.argv[2]), sys.argv[3]))
    sys.exit("usage: python -m tests.faults.procs controller PORT DB_URL")
