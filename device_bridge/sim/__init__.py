"""The simulated device and toolchain (docs/design.md §8): try droidwire without a phone or an SDK.

The device (the real adb server accepts it with ``adb connect``):

==================  ===========================================================================
``device``          :class:`~device_bridge.sim.device.SimDevice`: listener, services, auth,
                    ``adb reverse``, the shell, reboot, screen and input
``device_apps``     its packages, processes, activities and focus, instrumentation
                    (DeviceHooks for the player)
``device_core``     its clock, log and kernel facts (``/proc``, ``uname``, ``bugreport``)
``threaded``        :class:`~device_bridge.sim.threaded.ThreadedSimDevice`: one on its own loop
                    in a thread, for blocking callers (adbutils, tests, the demo)
``adbd``            the transport: handshake, streams, flow control, maxdata
``auth``            adb's RSA authentication, as a secure phone asks it of a host
``services``        adbd's services other than shell, exec and sync, as a user build answers
``listener``        a TCP listener that closes every connection it accepted
``transport``       sans-I/O message framing
``sync``            the ``sync:`` service (STAT/STA2/LST2, LIST/LIS2, SEND, RECV, QUIT)
``shell``           the mini shell (lists, pipes, redirections, ``$?``, builtins); its grammar
                    ``shell_parse``, ``$((…))`` ``shell_arith``, a command's streams ``shell_io``
``commands``        the command table and the basic tools (echo, getprop, cat, grep, ls, ps…);
                    families: ``commands_logcat``, ``commands_framework`` (pm, am, cmd, wm,
                    dumpsys), ``commands_screen`` (input, screencap, screenrecord,
                    uiautomator), ``toybox``, ``system``
``logbuf``          logcat ring buffers and formats
``files``           ``/data/local/tmp`` and ``/sdcard``
``screen``          the on-screen layout (uiautomator XML, screenshots, tap targets)
``dumpsys``         ``dumpsys`` reports
``profiles``        named device profiles (``pixel-7``, ``galaxy-a52``, ``old-nexus``…)
``ui_demo``         the demo app's UI: two screens, a switch, a toast, a keyboard
``video``           ``screenrecord``'s H.264 stream
``net``             the phone's own loopback (sockets between things on the device)
``waiters``         coroutines parked until a condition holds
``pace``            how long installs, app starts and tests take in wall time (``phone``)
==================  ===========================================================================

``instrument_output`` is what ``am instrument -w -r`` prints around a run. ``apk`` is the
simulated APK contract between the device and the simulated toolchain
(``toolchain``, ``player``, ``behaviour``; a test's steps come from ``toolchain_steps``,
``toolchain_walker`` and ``toolchain_values``; the compiler's parsing ``toolchain_kotlin``
(tree-sitter), its name resolution ``toolchain_resolve`` and the classpath it knows
``toolchain_libraries``). Import submodules directly: this package imports
nothing, so the toolchain never pulls in the device (or the reverse).
"""
