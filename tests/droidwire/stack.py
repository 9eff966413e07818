"""A live droidwire stack of real processes, and the CLI run as a newcomer runs it.

:func:`live_stack` starts, each in its own process and exactly as docs/index.md shows them:
``droidwire controller`` (SQLite in a temporary folder, a bootstrap token), ``droidwire
sim-device``, and ``droidwire bridge`` (``--adb-connect`` to the simulated phone, its own adb
server on a free port, the simulated toolchain, a pause file). :func:`run_cli` runs a
``droidwire`` command in a pipe (no terminal) or in a pseudo-terminal of a given width.

Readiness is awaited on the controller's own answers (``/healthz``, ``/v1/devices``) within a
deadline, never by sleeping a fixed time.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.adb_support import ADB_BINARY, free_port
from tests.conftest import TIME_SCALE

__all__ = ["ADMIN", "Done", "Stack", "live_stack", "run_cli", "wait_until"]

ADMIN = "newcomer-admin-token-0123456789abcdef"
VENV_BIN = Path(sys.executable).parent
DROIDWIRE = str(VENV_BIN / "droidwire")
START_S = 90.0 * TIME_SCALE
COMMAND_S = 180.0 * TIME_SCALE


@dataclass
class Done:
    code: int
    out: str
    err: str  # in a pseudo-terminal, stdout and stderr are one stream: ``out``


def run_cli(
    *args: str,
    env: Mapping[str, str],
    tty: tuple[int, int] | None = None,
    stdin: str | None = None,
    cwd: Path | None = None,
    timeout: float = COMMAND_S,
) -> Done:
    """``droidwire ARGS…``: in a pipe, or with ``tty=(columns, rows)`` in a pseudo-terminal
    of that size (stdout and stderr both on it)."""
    argv = [DROIDWIRE, *args]
    if tty is None:
        done = subprocess.run(argv, env=dict(env), capture_output=True, text=True, cwd=cwd,
                              input=stdin, timeout=timeout, check=False)
        return Done(done.returncode, done.stdout, done.stderr)
    columns, rows = tty
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    term_env = {**env, "TERM": "xterm-256color"}
    term_env.pop("COLUMNS", None)
    proc = subprocess.Popen(argv, env=term_env, stdin=slave, stdout=slave, stderr=slave,
                            cwd=cwd, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    end = time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([master], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                raise TimeoutError(f"droidwire {' '.join(args)} did not finish")
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the terminal's last writer is gone
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=max(1.0, end - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return Done(code, b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n"), "")


def wait_until(what: str, check: Callable[[], Any], *, deadline_s: float = START_S,
               alive: Callable[[], str | None] | None = None) -> Any:
    """Ask ``check`` until it answers something true; fail with ``what`` after the deadline
    (or at once when ``alive`` reports a process that died)."""
    end = time.monotonic() + deadline_s
    while True:
        with contextlib.suppress(httpx.HTTPError, OSError):
            value = check()
            if value:
                return value
        if alive is not None and (dead := alive()):
            raise AssertionError(f"waiting for {what}: {dead}")
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {deadline_s:g} s")
        time.sleep(0.1)  # between two questions to the controller, not a synchronisation


@dataclass
class Stack:
    root: Path
    port: int
    sim_port: int
    adb_port: int
    pause_file: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def serial(self) -> str:
        return f"127.0.0.1:{self.sim_port}"

    @property
    def device_id(self) -> str:
        return f"my-desk~{self.serial}"

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(encoding="utf-8", errors="replace")

    def cli(self, *args: str, **kwargs: Any) -> Done:
        return run_cli(*args, env=kwargs.pop("env", self.env), cwd=kwargs.pop("cwd", self.root),
                       **kwargs)

    def devices(self) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.url}/v1/devices",
                           headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
        answer.raise_for_status()
        devices: list[dict[str, Any]] = answer.json()
        return devices

    def state(self) -> str | None:
        return next((d["state"] for d in self.devices() if d["id"] == self.device_id), None)

    def dead(self) -> str | None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                return f"{name} exited {proc.returncode}:\n{self.log(name)[-3000:]}"
        return None

    def spawn(self, name: str, *args: str) -> None:
        log = open(self.root / f"{name}.log", "wb")
        self.procs[name] = subprocess.Popen([DROIDWIRE, *args], env=self.env, cwd=self.root,
                                            stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        log.close()


def base_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DROIDWIRE_", "COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR"))}
    (root / "home").mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(root / "home"), XDG_DATA_HOME=str(root / "data"),
               PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}", PYTHONUNBUFFERED="1")
    return env


@contextlib.contextmanager
def live_stack(root: Path) -> Iterator[Stack]:
    """Controller, simulated phone and bridge, each a ``droidwire`` process (docs/index.md)."""
    env = base_env(root)
    stack = Stack(root=root, port=free_port(), sim_port=free_port(), adb_port=free_port(),
                  pause_file=root / "paused", env=env)
    env["ANDROID_ADB_SERVER_PORT"] = str(stack.adb_port)
    try:
        stack.spawn("controller", "controller", "--port", str(stack.port),
                    "--bootstrap-token", ADMIN)
        stack.spawn("sim", "sim-device", "--port", str(stack.sim_port))
        wait_until("the controller answers /healthz",
                   lambda: httpx.get(f"{stack.url}/healthz", timeout=5).is_success,
                   alive=stack.dead)
        env.update(DROIDWIRE_CONTROLLER=stack.url, DROIDWIRE_TOKEN=ADMIN)
        token = stack.cli("token", "create", "--kind", "bridge", "my-desk")
        assert token.code == 0, token.err
        (root / "bridge.token").write_text(token.out)
        stack.spawn("bridge", "bridge", "--controller", stack.url, "--token-file", "bridge.token",
                    "--adb-port", str(stack.adb_port), "--adb-connect", stack.serial,
                    "--build-toolchain", "simulated", "--pause-file", str(stack.pause_file))
        wait_until("the simulated phone is ready behind the bridge",
                   lambda: stack.state() == "device", alive=stack.dead)
        yield stack
    finally:
        for proc in reversed(list(stack.procs.values())):
            if proc.poll() is None:
                proc.terminate()
        for proc in stack.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run([ADB_BINARY, "-P", str(stack.adb_port), "kill-server"],
                           capture_output=True, timeout=15, check=False)
