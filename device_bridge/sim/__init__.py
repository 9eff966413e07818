"""The simulated device and toolchain (docs/design.md §8): try droidwire without a phone or an SDK.

The device (the real adb server accepts it with ``adb connect``):

==================  ===========================================================================
``device``          :class:`~device_bridge.sim.device.SimDevice`: listener, Android state
                    (packages, processes, focus, clock), services, DeviceHooks for the player
``threaded``        :class:`~device_bridge.sim.threaded.ThreadedSimDevice`: one on its own loop
                    in a thread, for blocking callers (adbutils, tests, the demo)
``adbd``            the transport: handshake, streams, flow control, maxdata
``transport``       sans-I/O message framing
``sync``            the ``sync:`` service (STAT/STA2/LST2, LIST/LIS2, SEND, RECV, QUIT)
``shell``           the mini shell (quoting, lists, pipes, redirections, ``$?``, builtins)
``commands``        getprop, logcat, pm, am, cmd, dumpsys, wm, input, screencap, uiautomator…
``logbuf``          logcat ring buffers and formats
``files``           ``/data/local/tmp`` and ``/sdcard``
``screen``          the on-screen layout (uiautomator XML, screenshots, tap targets)
``dumpsys``         ``dumpsys`` reports
``profiles``        named device profiles (``pixel-7``, ``galaxy-a52``, ``old-nexus``…)
==================  ===========================================================================

``apk`` is the simulated APK contract between the device and the simulated toolchain
(``toolchain``, ``player``, ``behaviour``). Import submodules directly: this package imports
nothing, so the toolchain never pulls in the device (or the reverse).
"""
