"""Shared helpers: a recording DeviceHooks, compile-and-play, and LLM-style test sources."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field

from device_bridge.sim.apk import read_apk
from device_bridge.sim.player import SimInstrumentationPlayer
from device_bridge.sim.toolchain import CompileResult, SimulatedToolchain
from device_bridge.workspace_template import template_dir

PROJECT = template_dir()
PID = 4242
SYSTEM_PID = 1400


@dataclass
class Line:
    priority: str
    tag: str
    message: str
    pid: int
    tid: int
    at_ms: float


@dataclass
class RecordingDevice:
    """The minimal DeviceHooks: records logcat lines (split like logcat does) and the clock."""

    system_pid: int = SYSTEM_PID
    clock_ms: float = 0.0
    lines: list[Line] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    killed: list[tuple[str, str]] = field(default_factory=list)

    def log(self, priority: str, tag: str, message: str, *, pid: int, tid: int) -> None:
        for part in message.split("\n"):
            self.lines.append(Line(priority, tag, part, pid, tid, self.clock_ms))

    def start_process(self, package: str) -> int:
        self.started.append(package)
        return PID

    def kill_process(self, package: str, *, reason: str) -> None:
        self.killed.append((package, reason))

    def advance(self, ms: float) -> None:
        assert ms >= 0
        self.clock_ms += ms

    def tagged(self, tag: str) -> list[Line]:
        return [line for line in self.lines if line.tag == tag]

    def text(self) -> str:
        return "\n".join(f"{ln.pid} {ln.tid} {ln.priority} {ln.tag}: {ln.message}" for ln in self.lines)

    def elapsed(self) -> list[int]:
        """Every DroidUnblocker reading, in ms."""
        out = []
        for line in self.tagged("DroidUnblocker"):
            m = re.fullmatch(r"elapsed=(\d+)ms", line.message)
            assert m, line.message
            out.append(int(m.group(1)))
        return out

    def violations(self) -> list[str]:
        """Violation classes of the StrictMode blocks (first lines only)."""
        out = []
        for line in self.tagged("StrictMode"):
            m = re.match(r"StrictMode policy violation(?:; ~duration=\d+ ms)?: (\S+)", line.message)
            if m:
                out.append(m.group(1))
        return out


@dataclass
class Played:
    compiled: CompileResult
    output: list[str]
    device: RecordingDevice

    @property
    def text(self) -> str:
        return "\n".join(self.output)

    def codes_by_test(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        current = None
        for line in self.output:
            if line.startswith("INSTRUMENTATION_STATUS: test="):
                current = line.split("=", 1)[1]
            elif line.startswith("INSTRUMENTATION_STATUS_CODE: ") and current is not None:
                out.setdefault(current, []).append(int(line.split(": ", 1)[1]))
        return out

    def status_codes(self) -> list[int]:
        return [int(x.split(": ", 1)[1]) for x in self.output
                if x.startswith("INSTRUMENTATION_STATUS_CODE: ")]


def kotlin(source: str) -> str:
    return textwrap.dedent(source).lstrip()


def compile_test(source: str) -> CompileResult:
    return SimulatedToolchain().compile(PROJECT, kotlin(source))


def compile_and_play(source: str, *, class_filter: str | None = None) -> Played:
    compiled = compile_test(source)
    assert compiled.ok, compiled.output
    assert compiled.app_apk is not None and compiled.test_apk is not None
    device = RecordingDevice()
    player = SimInstrumentationPlayer()
    output = list(player.play(read_apk(compiled.test_apk), read_apk(compiled.app_apk),
                              class_filter=class_filter, device=device))
    return Played(compiled, output, device)


IMPORTS = """\
package com.droidwire.demo

import android.os.StrictMode
import android.os.SystemClock
import android.util.Log
import androidx.test.core.app.ActivityScenario
import androidx.test.ext.junit.runners.AndroidJUnit4
import org.junit.Assert.assertTrue
import org.junit.Test
import org.junit.runner.RunWith
"""


def llm_test(method: str, *, body: str | None = None, policy: bool = True) -> str:
    """A test the way an LLM writes one: policy and timing inside onActivity, Log.i tag."""
    set_policy = (
        "StrictMode.setThreadPolicy(\n"
        "                    StrictMode.ThreadPolicy.Builder().detectAll().penaltyLog().build()\n"
        "                )" if policy else ""
    )
    call = body or f"activity.{method}()"
    return IMPORTS + textwrap.dedent(f"""
        @RunWith(AndroidJUnit4::class)
        class {method[0].upper() + method[1:]}BlockingTest {{

            @Test
            fun {method}_doesNotBlockTheMainThread() {{
                ActivityScenario.launch(MainActivity::class.java).use {{ scenario ->
                    scenario.onActivity {{ activity ->
                        {set_policy}
                        val start = SystemClock.elapsedRealtime()
                        {call}
                        val elapsed = SystemClock.elapsedRealtime() - start
                        Log.i("DroidUnblocker", "elapsed=${{elapsed}}ms")
                    }}
                }}
            }}
        }}
        """)
