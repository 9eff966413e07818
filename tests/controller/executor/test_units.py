"""Pure parts of the executor: device selectors, the remote source index, the request model,
and the error → reason code mapping."""

from __future__ import annotations

import base64
import json

import pytest
from pydantic import ValidationError

from controller.executor import DeviceView, ExecuteRequest, reason_for, select_devices, tool_schema
from controller.executor.remote_index import RemoteSourceIndex, names_to_look_up
from controller.executor.selection import parse_selector
from protocol.errors import ErrorCode, RpcError


def dev(bridge: str, serial: str, sdk: int | None = 34, state: str = "device",
        model: str = "Pixel 7") -> DeviceView:
    return DeviceView(bridge, bridge, "u", serial, state, {"sdk": sdk, "model": model})


DEVICES = [dev("a", "s1", 30), dev("a", "s2", 34, model="Galaxy A52"), dev("b", "s1", 28),
           dev("b", "s3", 34, state="offline")]


def ids(picked: list[DeviceView]) -> list[str]:
    return [d.id for d in picked]


def test_selectors() -> None:
    assert ids(select_devices([], DEVICES)) == ["a~s1"]
    assert ids(select_devices(["all"], DEVICES)) == ["a~s1", "a~s2", "b~s1"]
    assert ids(select_devices(["2"], DEVICES)) == ["a~s1", "a~s2"]
    assert ids(select_devices(["sdk>=30"], DEVICES)) == ["a~s1", "a~s2"]
    assert ids(select_devices(["sdk<30", "a~s2"], DEVICES)) == ["b~s1", "a~s2"]
    assert ids(select_devices(["model=Galaxy A52"], DEVICES)) == ["a~s2"]
    assert ids(select_devices(["s2"], DEVICES)) == ["a~s2"]
    assert ids(select_devices(["b~s3"], DEVICES)) == []  # offline: not picked ...
    assert ids(select_devices(["b~s3"], DEVICES, only_ready=False)) == ["b~s3"]  # ... but known
    with pytest.raises(RpcError) as ambiguous:
        select_devices(["s1"], DEVICES)
    assert ambiguous.value.code is ErrorCode.CONFLICT
    assert ambiguous.value.data["candidates"] == ["a~s1", "b~s1"]


@pytest.mark.parametrize("bad", ["", "0", "101", "sdk>=x", "model>3", "a\nb", "x" * 201])
def test_malformed_selectors_are_bad_requests(bad: str) -> None:
    with pytest.raises(RpcError) as info:
        parse_selector(bad)
    assert info.value.code is ErrorCode.BAD_REQUEST


def test_remote_index_answers_like_the_local_one() -> None:
    index = RemoteSourceIndex([
        {"name": "loadSettingsFromDisk", "owner": "com.droidwire.demo.MainActivity",
         "file": "app/src/main/java/com/droidwire/demo/MainActivity.kt", "line": 51,
         "signature": "fun loadSettingsFromDisk(): String", "text": "fun loadSettingsFromDisk(): String {\n}"},
        {"name": "top", "owner": None, "file": "Util.kt", "line": 1},
        {"name": 5}, {"owner": "x"},  # malformed records are skipped
    ])
    assert len(index) == 2
    [m] = index.lookup("loadSettingsFromDisk")
    assert m.owner == "MainActivity" and m.package == "com.droidwire.demo" and m.end_line == 52
    [c] = index.find_class("MainActivity")
    assert c.qualified_name == "com.droidwire.demo.MainActivity"
    assert [x.name for x in index.methods_of("com.droidwire.demo.MainActivity")] == [
        "loadSettingsFromDisk"
    ]
    assert index.find_class("Nope") == [] and index.lookup("nope") == []


def test_names_to_look_up() -> None:
    code = "package a.b\nimport x.Y\nclass T {\n  fun t() { activity.decode(1); Log.i(\"x\", \"y\") }\n}\n"
    output = "e: file:///p/T.kt:4:24 Unresolved reference 'decode'.\n"
    names = names_to_look_up(code, output)
    assert names[0] == "decode"
    assert {"Log", "T", "i"} <= set(names) and "fun" not in names and "Y" not in names


def test_request_model() -> None:
    ok = ExecuteRequest(test_code="class T", device=["all", "sdk>=30"], timeout_s=30)
    assert ok.selectors == ["all", "sdk>=30"] and not ok.skipped
    assert ExecuteRequest(test_code="x Could not generate test body y").skipped
    assert ExecuteRequest.model_validate({"test_code": "x", "device": 2}).selectors == ["2"]
    for bad in ({}, {"test_code": ""}, {"test_code": "x", "extra": 1},
                {"test_code": "x", "timeout_s": 0}, {"test_code": "x", "timeout_s": 1e9},
                {"test_code": "x", "device": True}, {"test_code": "x", "device": ["a"] * 33},
                {"test_code": "x", "apks": {"app": "!!", "test": "AA=="}}):
        with pytest.raises(ValidationError):
            ExecuteRequest.model_validate(bad)
    apks = {"app": base64.b64encode(b"app").decode(), "test": base64.b64encode(b"t").decode()}
    req = ExecuteRequest.model_validate({"test_code": "x", "apks": apks})
    assert req.apks is not None and req.apks.decoded() == (b"app", b"t")
    assert req.for_record()["apks"] == "prebuilt"


def test_reason_codes() -> None:
    def err(code: ErrorCode, **data: str) -> RpcError:
        return RpcError(code, "m", data or None)

    assert reason_for(err(ErrorCode.TIMEOUT), "build") == "timeout"
    assert reason_for(err(ErrorCode.TIMEOUT), "device") == "timeout"
    assert reason_for(err(ErrorCode.FORBIDDEN), "build") == "compile_failed"
    assert reason_for(err(ErrorCode.UNAVAILABLE), "build") == "bridge_unavailable"
    assert reason_for(err(ErrorCode.UNAVAILABLE, reason="bridge_disconnected"), "device") == (
        "bridge_unavailable"
    )
    assert reason_for(err(ErrorCode.DEVICE_OFFLINE), "device") == "adb_unavailable"
    assert reason_for(err(ErrorCode.NOT_FOUND, rule="not_exposed"), "device") == "no_device"
    assert reason_for(err(ErrorCode.NOT_FOUND), "device") == "adb_unavailable"


def test_tool_schema_is_json() -> None:
    tool = json.loads(json.dumps(tool_schema()))
    assert tool["function"]["name"] == "sandbox_executor"
    assert tool["function"]["parameters"]["required"] == ["test_code"]


def test_no_evidence_is_refuted_only_when_the_tests_ran_to_completion() -> None:
    from controller.analysis import analyze, parse_instrumentation
    from controller.executor.results import analysed_result

    device = dev("a", "s1")
    quiet = "11-30 05:00:00.000  100  100 I Other: nothing to see\n"
    done = ("INSTRUMENTATION_STATUS: class=a.T\nINSTRUMENTATION_STATUS: test=t\n"
            "INSTRUMENTATION_STATUS_CODE: 1\nINSTRUMENTATION_STATUS: class=a.T\n"
            "INSTRUMENTATION_STATUS: test=t\nINSTRUMENTATION_STATUS_CODE: 0\n"
            "INSTRUMENTATION_RESULT: stream=OK (1 test)\nINSTRUMENTATION_CODE: -1\n")
    nothing = "INSTRUMENTATION_RESULT: stream=OK (0 tests)\nINSTRUMENTATION_CODE: -1\n"

    def verdict(log: str, output: str | None, abort: tuple[str, str] | None = None) -> tuple[str, str]:
        parsed = parse_instrumentation(output) if output else None
        analysis = analyze(log, package="com.droidwire.demo", instrumentation=parsed)
        r = analysed_result("r", device, analysis, log, parsed, abort)
        return r.verification_status, r.reason_code

    assert verdict(quiet, done) == ("REFUTED", "no_evidence")
    assert verdict(quiet, nothing) == ("PENDING", "test_crashed")
    assert verdict(quiet, None) == ("PENDING", "test_crashed")
    assert verdict("", done) == ("PENDING", "adb_unavailable")
    assert verdict(quiet, done, ("timeout", "x")) == ("PENDING", "timeout")
    blocked = "11-30 05:00:00.000  100  100 I DroidUnblocker: elapsed=900ms\n"
    assert verdict(blocked, None, ("timeout", "x"))[0] == "CONFIRMED"  # evidence stands


def test_a_run_result_answers_its_fields_in_order_and_the_optional_ones_once_set() -> None:
    from controller.executor.results import RunResult, pending_result

    device = dev("a", "s1")
    base = ["strict_mode_violations", "violation_kinds", "has_violations", "blocking_time_ms",
            "systrace", "summary", "verification_status", "reason_code", "run_id", "device",
            "toolchain", "builder", "compile_rounds", "tests", "anrs", "crashes", "issues",
            "timings"]
    result = pending_result("r", device, "timeout", "x")
    assert list(result.to_json()) == base
    # Set to null is still said; never set is left out.
    result.test_class, result.package, result.run_status = None, None, "ok"
    assert list(result.to_json()) == [*base, "test_class", "package", "run_status"]
    assert result.to_json()["test_class"] is None
    assert result.device_id == "a~s1"
    assert RunResult(run_id="r").device_id is None
    # What the store keeps reads back as the same result.
    assert RunResult.model_validate(result.to_json()).to_json() == result.to_json()
