"""Named device profiles: what a simulated device says it is (getprop, screen, banner)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PROFILES", "DeviceProfile", "get_profile"]


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    manufacturer: str
    brand: str
    model: str
    device: str  # ro.product.device (codename)
    product: str  # ro.product.name
    sdk: int
    release: str
    build_id: str
    abi: str
    width: int
    height: int
    density: int
    launcher: str  # package/activity that has focus after boot

    def props(self, serial: str) -> dict[str, str]:
        """The device's properties, as ``getprop`` prints them."""
        abilist = {"arm64-v8a": "arm64-v8a,armeabi-v7a,armeabi", "x86_64": "x86_64,x86"}
        fingerprint = (
            f"{self.brand}/{self.product}/{self.device}:{self.release}/{self.build_id}/"
            f"{self.sdk}00001:user/release-keys"
        )
        return {
            "dalvik.vm.heapsize": "512m",
            "persist.sys.locale": "en-US",
            "persist.sys.timezone": "Etc/UTC",
            "ro.boot.serialno": serial,
            "ro.build.characteristics": "nosdcard",
            "ro.build.fingerprint": fingerprint,
            "ro.build.id": self.build_id,
            "ro.build.tags": "release-keys",
            "ro.build.type": "user",
            "ro.build.version.release": self.release,
            "ro.build.version.sdk": str(self.sdk),
            "ro.debuggable": "0",
            "ro.droidwire.sim": "1",
            "ro.droidwire.screen_size": f"{self.width}x{self.height}",
            "ro.product.board": self.device,
            "ro.product.brand": self.brand,
            "ro.product.cpu.abi": self.abi,
            "ro.product.cpu.abilist": abilist.get(self.abi, self.abi),
            "ro.product.device": self.device,
            "ro.product.manufacturer": self.manufacturer,
            "ro.product.model": self.model,
            "ro.product.name": self.product,
            "ro.secure": "1",
            "ro.serialno": serial,
            "ro.sf.lcd_density": str(self.density),
            "sys.boot_completed": "1",
        }


PROFILES: dict[str, DeviceProfile] = {
    p.name: p
    for p in (
        DeviceProfile(
            name="pixel-7",
            manufacturer="Google",
            brand="google",
            model="Pixel 7",
            device="panther",
            product="panther",
            sdk=34,
            release="14",
            build_id="UQ1A.240205.004",
            abi="arm64-v8a",
            width=1080,
            height=2400,
            density=420,
            launcher="com.google.android.apps.nexuslauncher/.NexusLauncherActivity",
        ),
        DeviceProfile(
            name="galaxy-a52",
            manufacturer="samsung",
            brand="samsung",
            model="SM-A525F",
            device="a52q",
            product="a52qnsxx",
            sdk=33,
            release="13",
            build_id="TP1A.220624.014",
            abi="arm64-v8a",
            width=1080,
            height=2400,
            density=450,
            launcher="com.sec.android.app.launcher/.activities.LauncherActivity",
        ),
        DeviceProfile(
            name="old-nexus",
            manufacturer="LGE",
            brand="google",
            model="Nexus 5X",
            device="bullhead",
            product="bullhead",
            sdk=28,
            release="9",
            build_id="PPR1.180610.009",
            abi="arm64-v8a",
            width=1080,
            height=1920,
            density=420,
            launcher="com.google.android.apps.nexuslauncher/.NexusLauncherActivity",
        ),
        DeviceProfile(
            name="tablet-x86",
            manufacturer="Google",
            brand="google",
            model="sdk_gtablet_x86_64",
            device="emu64xa",
            product="sdk_gtablet_x86_64",
            sdk=33,
            release="13",
            build_id="TE1A.220922.012",
            abi="x86_64",
            width=2560,
            height=1600,
            density=320,
            launcher="com.android.launcher3/.uioverrides.QuickstepLauncher",
        ),
    )
}


def get_profile(name: str) -> DeviceProfile:
    """The profile called ``name``; ``KeyError`` naming the known ones otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise KeyError(f"unknown device profile {name!r} (known: {known})") from None
