"""The simulated device and toolchain (DESIGN.md §8).

``device_bridge.sim.device.SimDevice`` serves the adb transport protocol so the real adb server
accepts it with ``adb connect``; ``device_bridge.sim.threaded.ThreadedSimDevice`` runs one on its
own event loop for synchronous callers; ``device_bridge.sim.apk`` is the simulated APK contract
between the device and the simulated toolchain. Import the submodules directly: this package
imports nothing, so the toolchain never pulls in the device (or the reverse).
"""
