"""The floor under ``tunnel_shell_rtt_ms``: bare TCP relays, each in a process of its own.

A tunnelled adb stream crosses three Python processes between the adb server and the phone —
the tunnel's local end, the controller, the bridge — each way. :func:`relay_chain` puts that
many processes in the same place with nothing else to do: each accepts a connection and copies
bytes both ways to the next one (the last to the simulated phone), no WebSocket, no frames, no
policy, no second adb server. An adb server ``adb connect``-ed to the chain's front port
reaches the phone through them, and a ``shell:echo`` there costs what the three process hops
alone cost on this machine: no tunnel through those three processes can be faster
(docs/benchmarks.md, "The floor under the bound").

Run as ``python -m bench.relay TARGET_PORT``: it prints ``{"port": N}`` once it listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import Iterator

__all__ = ["pipe", "relay_chain"]

CHUNK = 1 << 16


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` to ``writer`` until it ends (or either side fails), then close it."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def _serve(target_port: int) -> None:
    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            writer.close()
            return
        for w in (writer, up_writer):
            w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    print(json.dumps({"port": server.sockets[0].getsockname()[1]}), flush=True)
    await server.serve_forever()


@contextlib.contextmanager
def relay_chain(target_port: int, hops: int = 3) -> Iterator[int]:
    """``hops`` relay processes in a row in front of ``target_port``; the first one's port."""
    procs: list[subprocess.Popen[str]] = []
    port = target_port
    try:
        for _ in range(hops):
            proc = subprocess.Popen([sys.executable, "-m", "bench.relay", str(port)],
                                    stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
            procs.append(proc)
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError("a relay process did not start")
            port = int(json.loads(line)["port"])
        yield port
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


if __name__ == "__main__":
    from bench.common import die_with_parent

    die_with_parent()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(int(sys.argv[1])))
