"""``droidwire sim-device``: serve a simulated Android device for ``adb connect``."""

from __future__ import annotations

import asyncio
import contextlib
import signal

import typer

__all__ = ["sim_device"]


def sim_device(
    port: int = typer.Option(5555, "--port", "-p", min=0, max=65535,
                             help="TCP port to listen on (0: any free port)."),
    serial: str | None = typer.Option(None, "--serial", "-s",
                                      help="ro.serialno of the device (default SIM<port>)."),
    profile: str = typer.Option("pixel-7", "--profile",
                                help="Device profile: pixel-7, galaxy-a52, old-nexus, tablet-x86."),
    host: str = typer.Option("127.0.0.1", "--host",
                             help="Address to listen on. The device has no authentication: "
                                  "keep it on loopback unless the network is yours."),
    noise: float = typer.Option(1.0, "--noise", min=0.0,
                                help="Seconds between background log lines (0: none)."),
) -> None:
    """Serve a simulated device that `adb connect HOST:PORT` accepts."""
    from device_bridge.sim.device import SimDevice
    from device_bridge.sim.profiles import PROFILES

    if profile not in PROFILES:
        raise typer.BadParameter(
            f"unknown profile {profile!r}; known: {', '.join(sorted(PROFILES))}",
            param_hint="--profile",
        )
    device = SimDevice(port=port, host=host, serial=serial, profile=profile,
                       noise_interval=noise or None)

    async def serve() -> None:
        await device.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, lambda: asyncio.ensure_future(device.stop()))
        typer.echo(
            f"simulated {device.profile.model} ({profile}, Android {device.profile.release}, "
            f"serial {device.serial}) listening on {device.address}\n"
            f"connect with: adb connect {device.address}"
        )
        await device.serve_forever()
        typer.echo("stopped")

    try:
        asyncio.run(serve())
    except OSError as exc:
        typer.echo(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        typer.echo("stopped")
