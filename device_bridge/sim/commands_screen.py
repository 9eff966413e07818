"""The screen and input of the simulated device from its shell: ``input`` (tap, swipe, text,
keyevent), ``screencap``, ``screenrecord`` (raw H.264) and ``uiautomator dump``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from device_bridge.sim.shell_io import CommandFn, Proc, parse_int

__all__ = ["register"]


_KEYCODES = {
    "HOME": 3, "BACK": 4, "CALL": 5, "DPAD_UP": 19, "DPAD_DOWN": 20, "DPAD_LEFT": 21,
    "DPAD_RIGHT": 22, "DPAD_CENTER": 23, "VOLUME_UP": 24, "VOLUME_DOWN": 25, "POWER": 26,
    "CAMERA": 27, "TAB": 61, "SPACE": 62, "ENTER": 66, "DEL": 67, "MENU": 82, "SEARCH": 84,
    "MEDIA_PLAY_PAUSE": 85, "PAGE_UP": 92, "PAGE_DOWN": 93, "ESCAPE": 111,
    "FORWARD_DEL": 112, "MOVE_HOME": 122, "MOVE_END": 123, "APP_SWITCH": 187, "WAKEUP": 224,
    "SLEEP": 223,
}
_INPUT_SOURCES = {"touchscreen", "touchpad", "keyboard", "mouse", "dpad", "gamepad", "stylus",
                  "trackball", "joystick", "touchnavigation", "rotaryencoder"}


async def input_(p: Proc) -> int:
    args = p.argv[1:]
    if args and args[0] in _INPUT_SOURCES:
        args = args[1:]
    if not args:
        await p.err("Usage: input [<source>] <command> [<arg>...]\n")
        return 1
    sub, rest = args[0], args[1:]
    device = p.device
    prof = device.profile

    async def bad(msg: str) -> int:
        await p.err(f"Error: {msg}\n")
        return 1

    def point(xs: str, ys: str) -> tuple[float, float] | None:
        try:
            x, y = float(xs), float(ys)
        except ValueError:
            return None
        if not (0 <= x < prof.width and 0 <= y < prof.height):
            return None
        return x, y

    if sub == "tap":
        if len(rest) != 2:
            return await bad("Invalid arguments for command: tap")
        pt = point(*rest)
        if pt is None:
            return await bad(f"coordinates ({rest[0]}, {rest[1]}) are not on the "
                             f"{prof.width}x{prof.height} screen")
        device.input_event("tap", {"x": pt[0], "y": pt[1]})
        return 0
    if sub in ("swipe", "draganddrop"):
        if len(rest) not in (4, 5):
            return await bad(f"Invalid arguments for command: {sub}")
        a, b = point(rest[0], rest[1]), point(rest[2], rest[3])
        if a is None or b is None:
            return await bad(f"swipe ends must be on the {prof.width}x{prof.height} screen")
        duration = parse_int(rest[4]) if len(rest) == 5 else 300
        if duration is None or duration < 0:
            return await bad(f"bad duration {rest[4]}")
        device.input_event(sub, {"x1": a[0], "y1": a[1], "x2": b[0], "y2": b[1], "ms": duration})
        return 0
    if sub == "text":
        if len(rest) != 1:
            return await bad("Invalid arguments for command: text")
        device.input_event("text", {"text": rest[0].replace("%s", " ")})
        return 0
    if sub in ("keyevent", "press"):
        keys = [a for a in rest if a not in ("--longpress", "--doubletap")] or (
            ["DPAD_CENTER"] if sub == "press" else []
        )
        if not keys:
            return await bad("Invalid arguments for command: keyevent")
        codes = []
        for k in keys:
            name = k.removeprefix("KEYCODE_")
            code = parse_int(k) if k.isdigit() else _KEYCODES.get(name)
            if code is None or not 0 <= code <= 300:
                return await bad(f"unknown keycode {k}")
            codes.append(code)
        for code in codes:
            device.input_event("keyevent", {"code": code})
        return 0
    await p.err(f"Error: Unknown command: {sub}\n")
    return 1


async def screencap(p: Proc) -> int:
    args = p.argv[1:]
    png = False
    target: str | None = None
    j = 0
    while j < len(args):
        a = args[j]
        if a == "-p":
            png = True
        elif a in ("-d", "-a"):
            j += 1
        elif a.startswith("-"):
            await p.err(f"screencap: unknown option {a}\n")
            return 1
        else:
            target = a
        j += 1
    if target is not None and target.endswith(".png"):
        png = True
    # Encoding takes ~0.1 s: off the loop, so other streams and devices keep moving.
    data = await asyncio.to_thread(p.device.screenshot_of(p.device.screen(), png=png))
    if target is None:
        await p.stdout.write(data)
        return 0
    try:
        p.device.files.write(p.path(target), data)
    except OSError as exc:
        await p.err(f"Error opening file: {exc}\n")
        return 1
    return 0


async def screenrecord(p: Proc) -> int:
    """``screenrecord --output-format=h264 [--size WxH] [--bit-rate N] [--time-limit S] -``:
    the screen as raw H.264 on stdout (device_bridge/sim/video.py). Only stdout output, as
    the simulated phone has no muxer; a file target is refused."""
    from device_bridge.sim import screen as sim_screen
    from device_bridge.sim import video

    prof = p.device.profile
    size = (prof.width * 360 // max(prof.width, prof.height) * 2,
            prof.height * 360 // max(prof.width, prof.height) * 2)
    bit_rate, limit, fmt, target = 2_000_000, 180.0, "mp4", None
    for a in p.argv[1:]:
        key, _, value = a.partition("=")
        try:
            if key == "--output-format":
                fmt = value
            elif key == "--size":
                w, _, h = value.partition("x")
                size = (int(w), int(h))
            elif key == "--bit-rate":
                bit_rate = int(value)
            elif key == "--time-limit":
                limit = min(float(value), 180.0)
            elif key in ("--bugreport", "--verbose"):
                pass
            elif a.startswith("-") and a != "-":
                await p.err(f"Unknown option {a}\n")
                return 2
            else:
                target = a
        except ValueError:
            await p.err(f"Bad value in {a}\n")
            return 2
    if fmt != "h264" or target != "-":
        await p.err("the simulated screenrecord writes --output-format=h264 to stdout (-) only\n")
        return 1
    if not (16 <= size[0] <= 4096 and 16 <= size[1] <= 4096) or not video.available():
        await p.err("Unable to get output buffers (err=-38)\n")
        return 1
    encoder = video.H264Encoder(size[0], size[1], bit_rate=bit_rate)
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    interval = 1.0 / video.FPS
    try:
        while loop.time() < end:
            started = loop.time()
            image = sim_screen.picture(p.device.screen())
            data = await asyncio.to_thread(encoder.encode, image)
            if data:
                await p.stdout.write(data)
            await asyncio.sleep(max(0.0, interval - (loop.time() - started)))
    except (ConnectionError, OSError, EOFError):
        return 0  # the host stopped reading
    return 0


async def uiautomator(p: Proc) -> int:
    """``uiautomator dump [--compressed] [FILE]``: the window hierarchy as XML."""
    args = [a for a in p.argv[1:] if a not in ("--compressed", "--windows")]
    if not args or args[0] != "dump" or len(args) > 2:
        await p.err("Usage: uiautomator dump [--compressed] [file]\n")
        return 1
    target = args[1] if len(args) == 2 else "/sdcard/window_dump.xml"
    xml = p.device.ui_xml()
    if target in ("/dev/tty", "/dev/stdout"):
        await p.out(xml)
    else:
        try:
            p.device.files.write(p.path(target), xml.encode())
        except OSError as exc:
            await p.err(f"ERROR: could not write {target}: {exc}\n")
            return 1
    # (sic: the real tool's spelling)
    await p.out(f"UI hierchary dumped to: {target}\n")
    return 0


def register(command: Callable[..., Callable[[CommandFn], CommandFn]]) -> None:
    """Enter these commands into the shell's table (:func:`.commands.command`)."""
    command("input")(input_)
    command("screencap")(screencap)
    command("screenrecord")(screenrecord)
    command("uiautomator")(uiautomator)
