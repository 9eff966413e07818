"""A controller in a process of its own for the hostile-tenant suite (its memory is measured
from outside): ``python -m tests.security.procs PORT DB_URL``, the real runner with this
suite's settings (keepalive long enough for a 16 MiB frame to cross a loaded machine)."""

from __future__ import annotations

import asyncio
import os
import sys

from tests.faults.procs import ControllerProcess

__all__ = ["SecurityController"]


class SecurityController(ControllerProcess):
    async def start(self) -> None:
        env = {**os.environ, "DROIDWIRE_BOOTSTRAP_TOKEN": self.token}
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tests.security.procs", str(self.port), self.db_url,
                env=env, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
            )
        self.starts += 1
        await self.wait_ready()


def _controller(port: int, db_url: str) -> int:
    from controller.config import ControllerConfig
    from droidwire.serve import run
    from tests.security.support import SETTINGS

    config = ControllerConfig(host="127.0.0.1", port=port, db_url=db_url,
                              bootstrap_token=os.environ["DROIDWIRE_BOOTSTRAP_TOKEN"],
                              settings=SETTINGS, graceful_shutdown_s=1)
    return 0 if run(config, log_level="warning") else 1


if __name__ == "__main__":
    if len(sys.argv) == 3:
        sys.exit(_controller(int(sys.argv[1]), sys.argv[2]))
    sys.exit("usage: python -m tests.security.procs PORT DB_URL")
