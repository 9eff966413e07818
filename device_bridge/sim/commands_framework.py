"""The Android framework's command-line tools on the simulated device: ``pm`` (packages,
install sessions), ``am`` (start, force-stop, instrument), ``wm``, ``dumpsys``, and ``cmd``,
which reaches the package, activity, window and settings services by name. State changes
are the device's (``device_bridge.sim.device``); output is Android's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from device_bridge.sim import system
from device_bridge.sim.shell_io import CommandFn, Proc, parse_int

__all__ = ["register"]


# -- package manager --------------------------------------------------------------------------


async def _pm(p: Proc, args: list[str]) -> int:
    device = p.device
    if not args:
        await p.err("usage: pm [list|path|install|uninstall|clear] ...\n")
        return 1
    sub, rest = args[0], args[1:]
    if sub == "list" and rest[:1] == ["packages"]:
        flags = [a for a in rest[1:] if a.startswith("-")]
        filters = [a for a in rest[1:] if not a.startswith("-")]
        lines = []
        for name, path, third in device.package_listing():
            if ("-3" in flags and not third) or ("-s" in flags and third):
                continue
            if filters and filters[0] not in name:
                continue
            lines.append(f"package:{path}={name}\n" if "-f" in flags else f"package:{name}\n")
        await p.out("".join(lines))
        return 0
    if sub == "list" and rest[:1] == ["instrumentation"]:
        out = [
            f"instrumentation:{name}/{inst.pkg.runner} (target={inst.pkg.target_package})\n"
            for name, inst in sorted(device.packages.items())
            if inst.pkg.kind == "test"
        ]
        await p.out("".join(out))
        return 0
    if sub == "resolve-activity":
        # ``cmd package resolve-activity --brief [-c CATEGORY] PKG``: the launcher activity.
        name = rest[-1] if rest else ""
        inst = device.packages.get(name)
        if inst is None or inst.pkg.kind != "app":
            await p.out("No activity found\n")
            return 0
        await p.out(
            "priority=0 preferredOrder=0 match=0x108000 specificIndex=-1 isDefault=false\n"
            f"{name}/.MainActivity\n"
        )
        return 0
    if sub == "path":
        name = rest[-1] if rest else ""
        for pkg, path, _third in device.package_listing():
            if pkg == name:
                await p.out(f"package:{path}\n")
                return 0
        return 1
    if sub in ("install-create", "install-write", "install-commit", "install-abandon"):
        return await system.pm_session(p, sub, rest)
    if sub == "install":
        opts: set[str] = set()
        size: int | None = None
        apk: str | None = None
        j = 0
        while j < len(rest):
            a = rest[j]
            if a in ("-S", "-i", "--user", "--install-reason", "-p"):
                if j + 1 >= len(rest):
                    await p.err(f"Error: option {a} needs a value\n")
                    return 1
                if a == "-S":
                    size = parse_int(rest[j + 1])
                    if size is None or size < 0:
                        await p.err(f"Error: bad size {rest[j + 1]}\n")
                        return 1
                j += 2
                continue
            if a.startswith("-"):
                opts.add(a)
            else:
                apk = a
            j += 1
        if size is not None:
            if size > device.files.quota:
                await p.out("Failure [INSTALL_FAILED_INSUFFICIENT_STORAGE]\n")
                return 1
            data = bytearray()
            while len(data) < size:
                chunk = await p.stdin.read(min(65536, size - len(data)))
                if not chunk:
                    break
                data += chunk
            if len(data) < size:
                await p.out("Failure [INSTALL_FAILED_INVALID_APK: short read of streamed APK]\n")
                return 1
            source = "stdin"
        elif apk is None:
            await p.err("Error: APK content must be streamed\n")
            return 1
        else:
            try:
                data = bytearray(device.files.read(p.path(apk)))
            except OSError:
                await p.err(
                    f"Error: Unable to open file: {apk}\n"
                    "Consider using a file under /data/local/tmp/\n"
                )
                return 1
            source = p.path(apk)
        # pm on Android 7 and later replaces by default (``-r`` is accepted and ignored);
        # ``-R`` disallows replacing an installed package.
        await device.pace.installing(len(data))
        result = device.install(
            bytes(data), source=source, replace="-R" not in opts, allow_downgrade="-d" in opts
        )
        await p.out(result + "\n")
        return 0 if result == "Success" else 1
    if sub == "uninstall":
        names = [a for a in rest if not a.startswith("-")]
        if not names:
            await p.err("Error: package name not specified\n")
            return 1
        await device.pace.uninstalling()
        ok = device.uninstall(names[-1])
        await p.out("Success\n" if ok else "Failure [DELETE_FAILED_INTERNAL_ERROR]\n")
        return 0 if ok else 1
    if sub == "clear":
        names = [a for a in rest if not a.startswith("-")]
        ok = bool(names) and device.clear_data(names[-1])
        await p.out("Success\n" if ok else "Failed\n")
        return 0 if ok else 1
    await p.err(f"Unknown command: {sub}\n")
    return 1


async def pm(p: Proc) -> int:
    return await _pm(p, p.argv[1:])


# -- activity manager -------------------------------------------------------------------------


_AM_VALUE_OPTS = {"-a", "-c", "-d", "-t", "-f", "--user", "-e", "--es", "--ei", "--ez", "-P",
                  "--start-profiler", "--sampling", "-R", "--activity-brought-to-front"}


async def _am_start(p: Proc, args: list[str]) -> int:
    component: str | None = None
    wait = "-W" in args
    j = 0
    while j < len(args):
        a = args[j]
        if a == "-n" and j + 1 < len(args):
            component = args[j + 1]
            j += 2
        elif a in ("--es", "--ei", "--ez"):
            j += 3
        elif a in _AM_VALUE_OPTS:
            j += 2
        elif a.startswith("-"):
            j += 1
        else:
            component = component or a
            j += 1
    if not component or "/" not in component:
        await p.err("Error: Activity not started, unable to resolve Intent\n")
        return 1
    pkg, _, activity = component.partition("/")
    shown = f"{pkg}/{activity}"
    await p.out(f"Starting: Intent {{ cmp={shown} }}\n")
    ok, total_ms = p.device.start_activity(pkg, activity)
    if not ok:
        full = activity if not activity.startswith(".") else pkg + activity
        await p.err(f"Error type 3\nError: Activity class {{{pkg}/{full}}} does not exist.\n")
        return 1
    if wait:
        await p.out(
            f"Status: ok\nLaunchState: COLD\nActivity: {shown}\nTotalTime: {total_ms}\n"
            f"WaitTime: {total_ms + 4}\nComplete\n"
        )
    return 0


async def _am_instrument(p: Proc, args: list[str]) -> int:
    raw = wait = False
    extras: dict[str, str] = {}
    component: str | None = None
    j = 0
    while j < len(args):
        a = args[j]
        if a == "-r":
            raw = True
        elif a == "-w":
            wait = True
        elif a == "-e":
            if j + 2 >= len(args):
                await p.err("Error: -e needs a key and a value\n")
                return 1
            extras[args[j + 1]] = args[j + 2]
            j += 2
        elif a in ("--user", "-p", "--abi"):
            j += 1
        elif a.startswith("-"):
            pass
        else:
            component = a
        j += 1
    if component is None or "/" not in component:
        await p.err("Error: Bad component name: " + (component or "") + "\n")
        return 1
    lines = p.device.instrument(component, class_filter=extras.get("class"))
    if not wait:
        task = asyncio.create_task(_drain(lines))
        p.device.keep_task(task)
        return 0
    in_stream = False  # inside a multi-line "stream=" value
    code = 0
    async for fd, line in lines:
        if fd == 2:
            await p.err(line)
            code = 1
            continue
        if raw:
            await p.out(line)
            continue
        # Without -r, am prints only the "stream" texts of the status and result bundles.
        if line.startswith(("INSTRUMENTATION_STATUS: stream=", "INSTRUMENTATION_RESULT: stream=")):
            in_stream = True
            await p.out(line.split("=", 1)[1])
        elif line.startswith("INSTRUMENTATION_"):
            in_stream = False
            if line.startswith("INSTRUMENTATION_RESULT: shortMsg="):
                await p.out(line.replace("INSTRUMENTATION_RESULT: shortMsg=", "Error in ", 1))
        elif in_stream:
            await p.out(line)
    return code


async def _drain(lines: AsyncIterator[tuple[int, str]]) -> None:
    async for _ in lines:
        pass


async def _am(p: Proc, args: list[str]) -> int:
    if not args:
        await p.err("usage: am [start|force-stop|instrument] ...\n")
        return 1
    sub, rest = args[0], args[1:]
    if sub in ("start", "start-activity"):
        return await _am_start(p, rest)
    if sub in ("force-stop", "kill"):
        names = [a for a in rest if not a.startswith("-")]
        if not names:
            await p.err(f"Error: {sub} needs a package name\n")
            return 1
        p.device.force_stop(names[-1])
        return 0
    if sub == "instrument":
        return await _am_instrument(p, rest)
    await p.err(f"Error: Unknown command: {sub}\n")
    return 1


async def am(p: Proc) -> int:
    return await _am(p, p.argv[1:])


async def cmd(p: Proc) -> int:
    if len(p.argv) < 2:
        await p.err("cmd: No service specified; use -l to list all services\n")
        return 20
    service, rest = p.argv[1], p.argv[2:]
    if service == "package":
        return await _pm(p, rest)
    if service == "activity":
        return await _am(p, rest)
    if service == "window":
        return await _wm(p, rest)
    if service == "settings":
        return await system.settings_cmd(p, rest)
    if service == "-l":
        await p.out("Currently running services:\n  activity\n  package\n  window\n")
        return 0
    await p.err(f"cmd: Can't find service: {service}\n")
    return 20


# -- window manager, dumpsys -----------------------------------------------------------------


async def _wm(p: Proc, args: list[str]) -> int:
    prof = p.device.profile
    if args == ["size"]:
        await p.out(f"Physical size: {prof.width}x{prof.height}\n")
        return 0
    if args == ["density"]:
        await p.out(f"Physical density: {prof.density}\n")
        return 0
    if args[:1] in (["size"], ["density"]):
        await p.err("Error: changing the display is not supported by the simulated device\n")
        return 1
    await p.err(f"Error: unknown command '{' '.join(args)}'\n")
    return 1


async def wm(p: Proc) -> int:
    return await _wm(p, p.argv[1:])


async def dumpsys(p: Proc) -> int:
    args = p.argv[1:]
    if not args:
        await p.err("dumpsys: a service name is required by the simulated device\n")
        return 1
    text = p.device.dumpsys(args[0], args[1:])
    if text is None:
        await p.out(f"Can't find service: {args[0]}\n")
        return 0
    await p.out(text)
    return 0


def register(command: Callable[..., Callable[[CommandFn], CommandFn]]) -> None:
    """Enter these commands into the shell's table (:func:`.commands.command`)."""
    command("pm")(pm)
    command("am")(am)
    command("cmd")(cmd)
    command("wm")(wm)
    command("dumpsys")(dumpsys)
