"""An in-process gateway over the bridge's real RPC dispatcher, and LLM-style tests.

:class:`LocalGateway` is the executor's gateway without the WebSocket: each call goes straight
into :class:`device_bridge.rpc.Dispatcher` — the bridge's policy, the real adb server, the
simulated device, the build service with the simulated toolchain. The link itself is tested
by the hub's own tests and by ``droidwire demo`` (tests/droidwire/test_demo_cli.py).
"""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from controller.auth import DeviceRef
from controller.executor import BridgeView, DeviceView
from controller.executor.gateway import Target
from protocol.envelope import Capabilities
from protocol.errors import ErrorCode, RpcError
from protocol.methods import Method

OWNER = "owner-1"
P = TypeVar("P", bound=BaseModel)
R = TypeVar("R", bound=BaseModel)


class LocalGateway:
    """Bridges by name → dispatcher; devices as the test declares them."""

    def __init__(self) -> None:
        self.dispatchers: dict[str, Any] = {}
        self.caps: dict[str, Capabilities] = {}
        self.serials: dict[str, list[str]] = {}
        self.state: dict[str, str] = {}  # serial -> adb state override
        self.connected: dict[str, bool] = {}
        self.calls: list[tuple[str, str]] = []  # (target, method)
        self.sent: list[tuple[str, str, dict[str, Any]]] = []  # (target, method, params)
        self.hang: set[str] = set()  # methods that never answer (a stuck device)

    def add_bridge(self, name: str, dispatcher: Any, serials: list[str]) -> None:
        self.dispatchers[name] = dispatcher
        self.caps[name] = dispatcher.capabilities()
        self.serials[name] = list(serials)
        self.connected[name] = True

    def bridges(self) -> list[BridgeView]:
        return [
            BridgeView(name, name, OWNER, self.caps[name], self.connected[name])
            for name in self.dispatchers
        ]

    def devices(self) -> list[DeviceView]:
        out = []
        for name, serials in self.serials.items():
            for serial in serials:
                state = self.state.get(serial, "device")
                if not self.connected[name]:
                    state = "disconnected"
                out.append(DeviceView(name, name, OWNER, serial, state, {"sdk": 34}))
        return out

    async def call(
        self, target: Target, method: Method[P, R], params: P, *,
        timeout_s: float | None = None,
    ) -> R:
        result = await self.call_wire(
            target, method.name, params.model_dump(exclude_unset=True, exclude_none=True),
            timeout_s=timeout_s,
        )
        return method.parse_result(result)

    async def call_wire(
        self, target: Target, method: str, params: Mapping[str, Any], *,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        p = dict(params)
        if isinstance(target, DeviceRef):
            name = target.bridge_id
            p["serial"] = target.serial
        else:
            name = target
        self.calls.append((str(target), method))
        self.sent.append((str(target), method, {k: v for k, v in p.items() if k != "apk"}))
        if not self.connected.get(name, False):
            raise RpcError(ErrorCode.UNAVAILABLE, f"bridge of {name} is not connected",
                           {"reason": "bridge_disconnected"})
        try:
            async with asyncio.timeout(timeout_s):  # the hub's deadline, as Hub.call keeps it
                if method in self.hang:
                    await asyncio.Event().wait()
                result: dict[str, Any] = await self.dispatchers[name](method, p)
        except TimeoutError:
            raise RpcError(ErrorCode.TIMEOUT, f"{method} on {target} timed out") from None
        return result

    def methods_called(self) -> list[str]:
        return [m for _, m in self.calls]


def llm_style_test(method_call: str, *, name: str = "GeneratedBlockingTest",
                   imports: str | None = None) -> str:
    """A test the way an LLM writes one: scenario.use/onActivity, StrictMode set in the test,
    timing with SystemClock/nanoTime, Log.i("DroidUnblocker", …), helpers, several tests."""
    default_imports = """\
        import android.os.StrictMode
        import android.os.SystemClock
        import android.util.Log
        import androidx.test.core.app.ActivityScenario
        import androidx.test.ext.junit.runners.AndroidJUnit4
        import com.droidwire.demo.MainActivity
        import org.junit.Test
        import org.junit.runner.RunWith"""
    header = textwrap.dedent(imports if imports is not None else default_imports)
    body = textwrap.dedent(f"""\

        @RunWith(AndroidJUnit4::class)
        class {name} {{

            private fun enableStrictMode() {{
                StrictMode.setThreadPolicy(
                    StrictMode.ThreadPolicy.Builder().detectAll().penaltyLog().build()
                )
            }}

            @Test
            fun mainThreadWorkIsMeasured() {{
                ActivityScenario.launch(MainActivity::class.java).use {{ scenario ->
                    scenario.onActivity {{ activity ->
                        enableStrictMode()
                        val start = SystemClock.elapsedRealtime()
                        activity.{method_call}
                        val ms = SystemClock.elapsedRealtime() - start
                        Log.i("DroidUnblocker", "elapsed=${{ms}}ms")
                    }}
                }}
            }}

            @Test
            fun titleIsFormatted() {{
                ActivityScenario.launch(MainActivity::class.java).use {{ scenario ->
                    scenario.onActivity {{ activity ->
                        val t0 = System.nanoTime()
                        activity.formatTitle("inbox", 3)
                        Log.d("{name}", "title took ${{(System.nanoTime() - t0) / 1_000_000}}ms")
                    }}
                }}
            }}
        }}
        """)
    return "package com.droidwire.demo.test\n\n" + header + "\n" + body
