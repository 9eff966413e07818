"""``droidwire bridge``: run a device bridge that dials out to the controller.

Thin CLI → config → runner: flags and environment variables become overrides
of the TOML config (flag > env > file > default), :class:`device_bridge.bridge.Bridge` runs.
``device_bridge`` is imported inside the command only, so ``bridge list``, ``bridge forget``
(client commands about bridges, over ``/v1/bridges``) and ``--help`` do not load it.

Exit codes: 0 stopped (Ctrl-C / SIGTERM), 1 bad configuration, 2 refused by the controller
(unauthorized, forbidden, no bridge endpoint at the URL, replaced by a newer session,
incompatible), 3 the controller stayed unreachable: never reached within ``--start-budget``
(default 10 s: a wrong host or port fails fast), or lost for the whole reconnect budget after
a first connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from droidwire import missing_extra
from droidwire.client import ControllerOption, JsonOption, TokenOption, list_command
from protocol import redact
from protocol.settings import DEFAULTS as _D

__all__ = ["app", "bridge"]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# A controller never reached since the start is given up after this many seconds (exit 3): a
# wrong host or port fails fast. A service started before its controller sets more.
DEFAULT_START_BUDGET_S = 10.0


def _secs(default: float | None, *, off: bool = False) -> str:
    """Help text for a timing flag; the default is read from the one settings object."""
    return f"Seconds{', 0: off' if off else ''} (default {default:g})."


def bridge(
    ctx: typer.Context,
    controller: Annotated[
        list[str] | None,
        typer.Option(
            "--controller",
            "-c",
            envvar="DROIDWIRE_CONTROLLER",
            help="Controller URL (wss://HOST or https://HOST); repeat for failover.",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="DROIDWIRE_BRIDGE_TOKEN",
            show_default=False,
            help="Bridge token (prefer --token-file or DROIDWIRE_BRIDGE_TOKEN: a command line shows in ps).",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(envvar="DROIDWIRE_BRIDGE_TOKEN_FILE", help="File holding the bridge token."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", envvar="DROIDWIRE_BRIDGE_CONFIG", help="TOML config file."),
    ] = None,
    adb_connect: Annotated[
        list[str] | None,
        typer.Option(
            "--adb-connect",
            envvar="DROIDWIRE_ADB_CONNECT",
            help="HOST:PORT of a network device to keep connected (repeatable).",
        ),
    ] = None,
    adb_host: Annotated[str | None, typer.Option(help="adb server host.")] = None,
    adb_port: Annotated[
        int | None,
        typer.Option(envvar="ANDROID_ADB_SERVER_PORT", help="adb server port (default 5037)."),
    ] = None,
    start_adb: Annotated[
        bool | None,
        typer.Option(
            "--start-adb/--no-start-adb",
            help="Start the adb server if none runs on that port (default start).",
        ),
    ] = None,
    ca: Annotated[
        Path | None, typer.Option(envvar="DROIDWIRE_CA", help="CA bundle to verify the controller.")
    ] = None,
    verify: Annotated[
        bool | None,
        typer.Option(
            "--verify/--no-verify",
            envvar="DROIDWIRE_TLS_VERIFY",
            help="Verify the controller's TLS certificate (default verify).",
        ),
    ] = None,
    allow_plain: Annotated[
        bool | None,
        typer.Option("--allow-plain", help="Allow ws:// to a non-loopback controller."),
    ] = None,
    expose: Annotated[
        list[str] | None,
        typer.Option(help="Expose only these serials (repeatable) (default all attached)."),
    ] = None,
    hide: Annotated[
        list[str] | None, typer.Option(help="Never expose this serial (repeatable).")
    ] = None,
    device_profile: Annotated[
        list[str] | None,
        typer.Option(help="SERIAL=PROFILE: this device's profile (repeatable)."),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(help="Default profile: standard, instrument-only, no-shell, agent or full."),
    ] = None,
    paused: Annotated[
        bool | None, typer.Option("--paused", help="Start with sharing paused.")
    ] = None,
    pause_file: Annotated[
        str | None, typer.Option(help="While this file exists, sharing is paused.")
    ] = None,
    build_toolchain: Annotated[
        str | None,
        typer.Option(
            envvar="DROIDWIRE_BUILD_TOOLCHAIN",
            help="Serve builds: auto, gradle, kotlinc or simulated (default: no builds, unless the config file has a build section).",
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            envvar="DROIDWIRE_CONCURRENCY",
            help=f"RPC handlers at once (default {_D.handler_concurrency}).",
        ),
    ] = None,
    reconnect_budget: Annotated[
        float | None,
        typer.Option(
            envvar="DROIDWIRE_RECONNECT_BUDGET",
            help=f"Seconds to keep retrying after the first failure (default {_D.reconnect_budget_s:g}).",
        ),
    ] = None,
    start_budget: Annotated[
        float,
        typer.Option(
            envvar="DROIDWIRE_START_BUDGET",
            min=0,
            help="Seconds to keep trying a controller never reached since the start, then "
            "exit 3 (0: the reconnect budget from the start) (default 10).",
        ),
    ] = DEFAULT_START_BUDGET_S,
    backoff_first_max: Annotated[
        float | None, typer.Option(help=_secs(_D.backoff_first_max_s))
    ] = None,
    backoff_base: Annotated[float | None, typer.Option(help=_secs(_D.backoff_base_s))] = None,
    backoff_factor: Annotated[
        float | None,
        typer.Option(help=f"Growth per failed attempt (default {_D.backoff_factor:g})."),
    ] = None,
    backoff_cap: Annotated[float | None, typer.Option(help=_secs(_D.backoff_cap_s))] = None,
    ping_interval: Annotated[
        float | None,
        typer.Option(envvar="DROIDWIRE_PING_INTERVAL", help=_secs(_D.ping_interval_s, off=True)),
    ] = None,
    ping_timeout: Annotated[
        float | None,
        typer.Option(envvar="DROIDWIRE_PING_TIMEOUT", help=_secs(_D.ping_timeout_s, off=True)),
    ] = None,
    close_timeout: Annotated[float | None, typer.Option(help=_secs(_D.close_timeout_s))] = None,
    handshake_timeout: Annotated[
        float | None, typer.Option(help=_secs(_D.handshake_timeout_s))
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            envvar="DROIDWIRE_BRIDGE_METRICS_PORT",
            min=0,
            max=65535,
            help="Serve Prometheus metrics on 127.0.0.1:PORT/metrics (default off).",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Run a device bridge: dial out to the controller, serve this host's adb devices.

    The commands below are client commands about bridges instead.
    """
    if ctx.invoked_subcommand is not None:
        return  # `bridge list|forget`: a client command, no bridge to run
    from device_bridge.bridge import Bridge
    from device_bridge.config import ConfigError, load_host_config
    from device_bridge.link_failure import LinkError

    logging.basicConfig(level=log_level.upper(), format=LOG_FORMAT)
    redact.add_secret(token)
    redact.install()  # no token in any log line, at any level (docs/security.md)
    overrides = {
        "controller.url": _split(controller),
        "controller.token": token,
        "controller.token_file": str(token_file) if token_file is not None else None,
        "controller.ca": str(ca) if ca is not None else None,
        "controller.verify": verify,
        "controller.allow_plain": allow_plain,
        "adb.connect": _split(adb_connect),
        "adb.host": adb_host,
        "adb.server_port": adb_port,
        "adb.start_server": start_adb,
        "policy.expose": list(expose) if expose else None,
        "policy.hide": list(hide) if hide else None,
        "policy.devices": _pairs(device_profile),
        "policy.profile": profile,
        "policy.paused": paused,
        "policy.pause_file": pause_file,
        "build.toolchain": build_toolchain,
        "link.concurrency": concurrency,
        "link.reconnect_budget_s": reconnect_budget,
        "link.backoff_first_max_s": backoff_first_max,
        "link.backoff_base_s": backoff_base,
        "link.backoff_factor": backoff_factor,
        "link.backoff_cap_s": backoff_cap,
        "link.ping_interval_s": ping_interval,
        "link.ping_timeout_s": ping_timeout,
        "link.close_timeout_s": close_timeout,
        "link.handshake_timeout_s": handshake_timeout,
    }
    try:
        if device_profile and any("=" not in v for v in device_profile):
            raise ConfigError("--device-profile takes SERIAL=PROFILE")
        host_config = load_host_config(config, overrides)
        runner = Bridge(host_config)
        runner.start_budget_s = start_budget or None
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None

    if metrics_port is not None and missing_extra("metrics") is not None:
        typer.echo("error: --metrics-port needs the metrics extra: "
                   "pip install 'droidwire[metrics]'", err=True)
        raise typer.Exit(1)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        metrics = None
        if metrics_port is not None:
            from device_bridge.metrics import serve_metrics

            try:
                metrics = serve_metrics(runner, metrics_port)
            except OSError as exc:
                raise ConfigError(f"--metrics-port {metrics_port}: {exc.strerror or exc}") from exc
            logging.getLogger("droidwire.bridge").info(
                "metrics on http://127.0.0.1:%d/metrics", metrics.port
            )
        try:
            await runner.run(stop)
        finally:
            if metrics is not None:
                await asyncio.to_thread(metrics.close)  # joins the server's thread

    try:
        asyncio.run(main())
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    except LinkError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        pass
    typer.echo("bridge stopped")


def _split(values: list[str] | None) -> list[str] | None:
    """Repeated flags, or one env var holding several values separated by commas/spaces."""
    if not values:
        return None
    out: list[str] = []
    for value in values:
        out += [v for v in value.replace(",", " ").split() if v]
    return out or None


def _pairs(values: list[str] | None) -> dict[str, str] | None:
    """``SERIAL=PROFILE`` flags as a table (the serial may itself hold ``:``, never ``=``)."""
    if not values:
        return None
    return dict(v.rsplit("=", 1) for v in values if "=" in v)


# -- `droidwire bridge list|forget`: client commands about bridges (``/v1/bridges``) ---------

app = typer.Typer(add_completion=False, no_args_is_help=False)
app.callback(invoke_without_command=True)(bridge)


def _print_bridges(bridges: list[dict[str, Any]]) -> None:
    from droidwire.output import print_id_table

    print_id_table(
        ("name", "owner", "state", "devices", "shared", "software"),
        ((b["id"], b["name"], b.get("owner") or "-", b["state"], str(b.get("devices", "-")),
          "yes" if b.get("shared") else "-", b.get("software") or "-") for b in bridges))


list_command(app, "/v1/bridges", _print_bridges,
             "The bridges you own (all of them for an admin): state, devices, version.")


@app.command()
def forget(
    name: Annotated[str, typer.Argument(metavar="BRIDGE", help="The bridge's name or id.")],
    json_out: JsonOption = False,
    controller: ControllerOption = None,
    token: TokenOption = None,
) -> None:
    """Forget a bridge that is gone for good, with its devices, their loans and its tokens
    (its owner or an admin; refused while it is connected)."""
    from droidwire.device import forget_path

    forget_path(name, "bridge", json_out, controller, token)
