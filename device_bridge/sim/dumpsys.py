"""``dumpsys``: the simulated device's state in the shapes tools grep for.

``mCurrentFocus=Window{… u0 pkg/.Activity}`` (window), ``mResumedActivity:`` (activity),
``level:`` (battery), ``orientation=`` (display, adbutils' screenshot fallback), and short but
well-formed ``package``, ``meminfo`` and ``gfxinfo`` reports.
"""

from __future__ import annotations

import time
import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from device_bridge.sim.device import SimDevice

__all__ = ["dumpsys", "window_hash"]


def window_hash(comp: str) -> str:
    """A stable stand-in for the object hashes Android prints (``Window{8a1f2c1 …}``)."""
    return f"{zlib.crc32(comp.encode()) & 0xFFFFFFF:07x}"

def dumpsys(dev: SimDevice, service: str, args: list[str]) -> str | None:
    """The text of ``dumpsys SERVICE ARGS…``, or None for a service the device lacks."""
    p = dev.profile
    focus = dev.focus
    pkg = focus.split("/", 1)[0]
    if service == "window":
        return (
            "WINDOW MANAGER DISPLAY CONTENTS (dumpsys window displays)\n"
            f"  Display: mDisplayId=0 rootTasks=1\n"
            f"    init={p.width}x{p.height} {p.density}dpi cur={p.width}x{p.height} "
            f"app={p.width}x{p.height - p.height // 20} rng={p.width}x{p.width}-"
            f"{p.height}x{p.height}\n"
            "    mCurrentRotation=ROTATION_0\n"
            f"  mWindowAnimationScaleSetting={dev.settings.get('global', 'window_animation_scale')}"
            f" mTransitionAnimationScaleSetting="
            f"{dev.settings.get('global', 'transition_animation_scale')}"
            f" mAnimatorDurationScaleSetting="
            f"{dev.settings.get('global', 'animator_duration_scale')}\n"
            f"  mCurrentFocus=Window{{{window_hash(focus)} u0 {focus}}}\n"
            f"  mFocusedApp=ActivityRecord{{{window_hash(focus + 'r')} u0 {focus} t12}}\n"
            + (f"  mInputMethodWindow=Window{{{window_hash('ime')} u0 InputMethod}}\n"
               if dev.keyboard_shown else "  mInputMethodWindow=null\n")
            + "  mHasSurface=true isReadyForDisplay()=true\n"
        )
    if service == "activity":
        records = "\n".join(
            f"      * Hist #{len(dev.recent) - 1 - i}: ActivityRecord"
            f"{{{window_hash(c + 'r')} u0 {c} t{12 + i}}}"
            for i, c in enumerate(dev.recent)
        )
        proc = dev.processes.get(pkg)
        top = f"ACTIVITY {focus} {window_hash(focus)} pid={proc.pid if proc else 0}\n"
        if args[:1] == ["top"]:
            return "TASK 12 id=12\n  " + top
        return (
            "ACTIVITY MANAGER ACTIVITIES (dumpsys activity activities)\n"
            "Display #0 (activities from top to bottom):\n"
            f"{records}\n\n"
            f"  ResumedActivity: ActivityRecord{{{window_hash(focus + 'r')} u0 {focus} t12}}\n"
            f"  mResumedActivity: ActivityRecord{{{window_hash(focus + 'r')} u0 {focus} t12}}\n"
            f"  mFocusedActivity: ActivityRecord{{{window_hash(focus + 'r')} u0 {focus} t12}}\n"
        )
    if service == "power":
        st = dev.settings
        return (
            "POWER MANAGER (dumpsys power)\n\nPower Manager State:\n"
            "  mWakefulness=Awake\n  mIsPowered=true\n  mPlugType=2\n"
            f"  mBatteryLevel={dev.battery_level}\n"
            f"  mStayOn={str(st.get('global', 'stay_on_while_plugged_in') not in (None, '0')).lower()}\n"
            "\nSettings and Configuration:\n"
            f"  mScreenOffTimeoutSetting={st.get('system', 'screen_off_timeout')}\n"
            f"  mStayOnWhilePluggedInSetting={st.get('global', 'stay_on_while_plugged_in')}\n"
            f"  mScreenBrightnessSetting={st.get('system', 'screen_brightness')}\n"
            f"  mScreenBrightnessModeSetting={st.get('system', 'screen_brightness_mode')}\n"
        )
    if service == "battery":
        return (
            "Current Battery Service state:\n  AC powered: false\n  USB powered: true\n"
            "  Wireless powered: false\n  Max charging current: 500000\n"
            "  Max charging voltage: 5000000\n  Charge counter: 2770000\n  status: 2\n"
            f"  health: 2\n  present: true\n  level: {dev.battery_level}\n  scale: 100\n"
            "  voltage: 4258\n"
            f"  temperature: {dev.battery_temperature}\n  technology: Li-ion\n"
        )
    if service == "cpuinfo":
        # The app in front works a little; the system too (AOSP ProcessCpuTracker's format).
        rows = [f"  {8 + proc.pid % 7}% {proc.pid}/{name}: {5 + proc.pid % 5}% user + 3% kernel"
                f" / faults: {proc.pid % 900} minor" for name, proc in sorted(dev.processes.items())
                if name == pkg]
        return ("Load: 1.12 / 0.98 / 0.87\nCPU usage from 5012ms to 11ms ago:\n"
                + "".join(r + "\n" for r in rows)
                + "  6% 1000/system_server: 4% user + 2% kernel / faults: 812 minor\n"
                + "21% TOTAL: 14% user + 6% kernel + 0.4% iowait\n")
    if service == "display":
        return (
            "DISPLAY MANAGER (dumpsys display)\n"
            f"  mDefaultDisplayDeviceInfo: DisplayDeviceInfo{{\"Built-in Screen\": "
            f"{p.width} x {p.height}, density {p.density}, orientation=0}}\n"
            "  mCurrentOrientation=0\n"
        )
    if service == "input_method":
        shown = str(dev.keyboard_shown).lower()
        return (f"  mCurFocusedWindowClient=Window{{{window_hash(focus)} u0 {focus}}}\n"
                f"  mInputShown={shown}\n  mShowRequested={shown}\n")
    if service == "package":
        return _package(dev, args[0] if args else "")
    if service in ("meminfo", "gfxinfo"):
        target = next((a for a in args if not a.startswith("-")), "")
        proc = dev.processes.get(target)
        if proc is None:
            return f"No process found for: {target}\n"
        uptime = int(time.monotonic() * 1000)
        if service == "meminfo":
            pss = 40_000 + proc.pid % 9_000
            return (
                "Applications Memory Usage (in Kilobytes):\n"
                f"Uptime: {uptime} Realtime: {uptime}\n\n"
                f"** MEMINFO in pid {proc.pid} [{target}] **\n"
                "                   Pss  Private  Private     Heap     Heap     Heap\n"
                "                 Total    Dirty    Clean     Size    Alloc     Free\n"
                f"  Native Heap     {pss // 4:>5}    {pss // 4:>5}        0    16384    "
                "12288     4096\n"
                f"  Dalvik Heap     {pss // 5:>5}    {pss // 5:>5}        0    24576    "
                "16384     8192\n"
                f"        TOTAL     {pss:>5}    {pss // 2:>5}     {pss // 8:>4}    40960    "
                "28672    12288\n"
            )
        return (
            "Applications Graphics Acceleration Info:\n"
            f"Uptime: {uptime} Realtime: {uptime}\n\n"
            f"** Graphics info for pid {proc.pid} [{target}] **\n\n"
            f"Total frames rendered: {120 + uptime * 60 // 1000}\nJanky frames: 3 (2.50%)\n"
            "50th percentile: 6ms\n90th percentile: 11ms\n95th percentile: 14ms\n"
            "99th percentile: 32ms\n"
        )
    return None

def _package(dev: SimDevice, name: str) -> str:
    inst = dev.packages.get(name)
    if inst is None:
        return "" if name not in dev.system_packages else (
            f"Packages:\n  Package [{name}] ({window_hash(name)}):\n    userId=1000\n")
    pkg = inst.pkg
    lines = [
        "Packages:",
        f"  Package [{name}] ({window_hash(name)}):",
        f"    userId={inst.uid}",
        f"    pkg=Package{{{window_hash(name)} {name}}}",
        f"    codePath={inst.path.rsplit('/', 1)[0]}",
        f"    versionCode={pkg.version_code} minSdk=24 targetSdk={dev.profile.sdk}",
        "    versionName=1.0",
        "    flags=[ HAS_CODE ALLOW_CLEAR_USER_DATA TEST_ONLY ]" if pkg.kind == "test"
        else "    flags=[ HAS_CODE ALLOW_CLEAR_USER_DATA ]",
        "    timeStamp=" + time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(inst.installed_at)),
    ]
    if pkg.kind == "test":
        lines.append(f"    Instrumentation: {name}/{pkg.runner} (target={pkg.target_package})")
    return "\n".join(lines) + "\n"
