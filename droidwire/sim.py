"""``droidwire sim-device``: serve a simulated Android device for ``adb connect``."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import typer

__all__ = ["sim_device"]

_HELP = """Serve a simulated Android phone that `adb connect HOST:PORT` accepts.

\b
What it simulates: a user-build phone (ro.build.type=user, ro.debuggable=0)
speaking adbd's device protocol — shell (legacy, v2, PTY), exec, sync
(push/pull/ls/stat), streamed and multi-APK installs, forward and reverse
(to the phone's own loopback), jdwp (empty), root/remount/tcpip answered as
a user build, reboot (connections drop, the phone boots again), and with
--auth a secure phone's RSA authorization ("unauthorized" until Allow).
Its shell: toybox basics, getprop, settings, pm, am, cmd, dumpsys, input,
wm, logcat (threadtime, -B binary), screencap, uiautomator, bugreportz,
/proc/stat|meminfo|loadavg; a demo app whose tests emit StrictMode, ANR and
crash lines.

\b
What it does not: no USB, no root, no bootloader or recovery (sideload is
refused, reboot targets boot Android), no real network from the phone (tcp:
targets are the phone's own loopback), no screenrecord, no abb_exec or
sendrecv_v2, no arbitrary apps (APKs made by droidwire's simulated toolchain
install and run; others are only stored).
"""


def sim_device(
    port: int = typer.Option(5555, "--port", "-p", min=0, max=65535,
                             help="TCP port to listen on (0: any free port)."),
    serial: str | None = typer.Option(None, "--serial", "-s",
                                      help="ro.serialno of the device (default SIM<port>)."),
    profile: str = typer.Option("pixel-7", "--profile",
                                help="Device profile: pixel-7, galaxy-a52, old-nexus, tablet-x86."),
    host: str = typer.Option("127.0.0.1", "--host",
                             help="Address to listen on. Without --auth any client may use "
                                  "the device: keep it on loopback unless the network is "
                                  "yours."),
    noise: float = typer.Option(1.0, "--noise", min=0.0,
                                help="Seconds between background log lines (0: none)."),
    auth: bool = typer.Option(False, "--auth/--no-auth",
                              help="A secure phone (ro.adb.secure=1): hosts sign adb's AUTH "
                                   "token with a trusted key, or offer their key and stay "
                                   "'unauthorized' until allowed. Off by default."),
    adb_keys: Path | None = typer.Option(None, "--adb-keys", exists=True, dir_okay=False,
                                         readable=True,
                                         help="File of trusted host keys, one adbkey.pub line "
                                              "each (like the phone's adb_keys). Implies "
                                              "--auth."),
    auto_allow: bool = typer.Option(False, "--auto-allow",
                                    help="With --auth: tap 'Always allow' on every prompt at "
                                         "once. Without it, send SIGUSR1 to this process to "
                                         "allow the waiting hosts."),
    pace: str = typer.Option("instant", "--pace",
                             help="Wall time of installs, app starts and tests: instant, or "
                                  "phone (as long as a fast phone takes)."),
) -> None:
    from device_bridge.sim.auth import AdbKeyError, PendingKey
    from device_bridge.sim.device import SimDevice
    from device_bridge.sim.pace import PACES
    from device_bridge.sim.profiles import PROFILES

    if pace not in PACES:
        raise typer.BadParameter(f"unknown pace {pace!r}; known: {', '.join(sorted(PACES))}",
                                 param_hint="--pace")
    if profile not in PROFILES:
        raise typer.BadParameter(
            f"unknown profile {profile!r}; known: {', '.join(sorted(PROFILES))}",
            param_hint="--profile",
        )
    keys: list[str] = []
    if adb_keys is not None:
        keys = adb_keys.read_text(errors="replace").splitlines()
    try:
        device = SimDevice(port=port, host=host, serial=serial, profile=profile,
                           noise_interval=noise or None, auth=auth or adb_keys is not None,
                           adb_keys=keys, auto_allow=auto_allow, pace=pace)
    except AdbKeyError as exc:
        raise typer.BadParameter(f"not an adb public key: {exc}", param_hint="--adb-keys") from None

    def prompt(p: PendingKey) -> None:
        typer.echo(f"adb authorization requested by {p.comment or 'a host'} "
                   f"(RSA key fingerprint {p.fingerprint}): send SIGUSR1 to allow", err=False)

    def allow_all() -> None:
        n = device.allow()
        typer.echo(f"allowed {n} waiting host(s)")

    async def serve() -> None:
        await device.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, lambda: asyncio.ensure_future(device.stop()))
        if device.auth is not None:
            device.auth.on_prompt = prompt
            with contextlib.suppress(NotImplementedError, RuntimeError, AttributeError):
                loop.add_signal_handler(signal.SIGUSR1, allow_all)
        secure = (", secure: adb authorization required" if device.auth is not None else "")
        typer.echo(
            f"simulated {device.profile.model} ({profile}, Android {device.profile.release}, "
            f"serial {device.serial}{secure}) listening on {device.address}\n"
            f"connect with: adb connect {device.address}",
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


sim_device.__doc__ = _HELP
