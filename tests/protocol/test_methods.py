from __future__ import annotations

import hashlib
from typing import Any

import pytest
from pydantic import BaseModel

from protocol.codec import decode, encode, encode_event
from protocol.envelope import Capabilities, DeviceInfo, Evt, Req, Res, new_request_id
from protocol.errors import ErrorCode, RpcError
from protocol.methods import (
    METHODS,
    Apk,
    Empty,
    LogBatch,
    MethodSpec,
    dump,
    parse_log_batch,
    register,
    timeout_for,
    validate_params,
    validate_result,
)
from protocol.settings import DEFAULTS
from tests.controller.agent.examples import AGENT_EXAMPLES
from tests.manage.examples import MANAGE_EXAMPLES

SERIAL = "emulator-5554"
PNG = b"\x89PNG\r\n\x1a\n"

#: One valid (params, result) pair per method: every registered method must appear here.
EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "ping": ({"payload": b"x" * 200}, {"payload": b"x" * 200}),
    "bridge.info": (
        {},
        {
            "software": "0.1.0",
            "protocol": 1,
            "session": new_request_id(),
            "caps": {"devices": True},
            "devices": [{"serial": SERIAL, "state": "device", "sdk": 34}],
        },
    ),
    "devices.list": ({}, {"devices": [{"serial": SERIAL, "state": "offline"}]}),
    "device.shell": (
        {"serial": SERIAL, "argv": ["echo", "hi"], "timeout_s": 5},
        {"exit_code": 0, "stdout": "hi\n", "stderr": ""},
    ),
    "device.logcat.clear": ({"serial": SERIAL, "buffers": ["main", "crash"]}, {}),
    "device.logcat.dump": (
        {"serial": SERIAL, "format": "threadtime", "lines": 500, "buffers": ["main"]},
        {"lines": ["01-01 00:00:00.000  1  1 I Tag: hi"]},
    ),
    "device.logcat.subscribe": ({"serial": SERIAL, "tail": 10}, {"channel": "logcat-1"}),
    "device.logcat.unsubscribe": ({"channel": "logcat-1"}, {}),
    "device.screenshot": ({"serial": SERIAL}, {"png": PNG}),
    "device.screen.subscribe": (
        {"serial": SERIAL, "codec": "h264", "max_fps": 10, "max_side": 720},
        {"channel": "sc-1", "codec": "jpeg", "source": "screencap"},
    ),
    "device.screen.unsubscribe": ({"channel": "sc-1"}, {}),
    "device.input": (
        {"serial": SERIAL, "action": "swipe", "x": 0.1, "y": 0.2, "x2": 0.5, "y2": 0.9},
        {"ok": True, "exit_code": 0, "argv": ["input", "swipe", "108", "480", "540", "2160"]},
    ),
    "device.push": (
        {"serial": SERIAL, "path": "/data/local/tmp/droidwire/a.txt", "data": b"abc"},
        {"size": 3},
    ),
    "device.pull": (
        {"serial": SERIAL, "path": "/data/local/tmp/droidwire/a.txt"},
        {"data": b"abc"},
    ),
    "device.install": ({"serial": SERIAL, "apk": b"PK\x03\x04"}, {"package": "com.example.app"}),
    "device.uninstall": ({"serial": SERIAL, "package": "com.example.app"}, {}),
    "device.instrument": (
        {"serial": SERIAL, "package": "com.example.app.test", "args": {"class": "a.B"}},
        {"output": "INSTRUMENTATION_CODE: -1\n", "exit_code": 0},
    ),
    "workspace.compile": (
        {"test_code": "class T {}", "project": "demo"},
        {
            "ok": True,
            "output": "BUILD SUCCESSFUL",
            "toolchain": "simulated",
            "apks": [dump(Apk.from_bytes("app", "app-debug.apk", b"PK..."))],
        },
    ),
    "source.lookup": (
        {"names": ["loadConfig"]},
        {"methods": [{"name": "loadConfig", "owner": "com.example.Repo", "line": 12}]},
    ),
}
EXAMPLES.update(AGENT_EXAMPLES)  # the agent toolkit's methods (issue 11)
EXAMPLES.update(MANAGE_EXAMPLES)  # device management: stages, files, apps, health (issue 18)
EXAMPLES.update({  # remote adb tunnels (issue 24)
    "device.tunnel.start": ({"serial": SERIAL}, {"features": ["shell_v2"], "profile": "standard"}),
    "device.tunnel.open": ({"serial": SERIAL, "service": "shell,v2,raw:getprop"},
                           {"channel": "tn-1", "kind": "raw"}),
    "device.tunnel.write": ({"channel": "tn-1", "offset": 0, "data": b"abc"}, {"written": 3}),
    "device.tunnel.ack": ({"channel": "tn-1", "n": 65536}, {}),
    "device.tunnel.close": ({"channel": "tn-1"}, {}),
})

#: Invalid params per method (each must be a bad_request).
BAD: list[tuple[str, dict[str, Any]]] = [
    ("ping", {"payload": "not bytes", "extra": 1}),
    ("bridge.info", {"unexpected": True}),
    ("device.shell", {"serial": SERIAL}),  # neither argv nor command
    ("device.shell", {"serial": SERIAL, "argv": ["ls"], "command": "ls"}),  # both
    ("device.shell", {"serial": SERIAL, "argv": []}),
    ("device.shell", {"serial": "has space", "command": "ls"}),
    ("device.shell", {"serial": SERIAL, "command": "ls", "timeout_s": -1}),
    ("device.logcat.dump", {"serial": SERIAL, "lines": 5001}),
    ("device.logcat.dump", {"serial": SERIAL, "buffers": ["secret"]}),
    ("device.logcat.dump", {"serial": SERIAL, "format": "json"}),
    ("device.logcat.subscribe", {"serial": SERIAL, "tail": -1}),
    ("device.push", {"serial": SERIAL, "path": "relative/path", "data": b""}),
    ("device.push", {"serial": SERIAL, "path": "/a\x00b", "data": b""}),
    ("device.pull", {"serial": SERIAL}),
    ("device.install", {"serial": SERIAL}),
    ("device.install", {"serial": SERIAL, "apk": b"x", "path": "/tmp/a.apk"}),
    ("device.uninstall", {"serial": SERIAL, "package": "com.x; rm -rf /"}),
    ("device.instrument", {"serial": SERIAL, "package": "a..b"}),
    ("workspace.compile", {"test_code": ""}),
    ("source.lookup", {"names": []}),
    ("device.tunnel.open", {"serial": SERIAL, "service": ""}),
    ("device.tunnel.open", {"serial": SERIAL, "service": "sync:", "window": 1}),
    ("device.tunnel.write", {"channel": "tn-1", "offset": -1, "data": b"x"}),
    ("device.tunnel.write", {"channel": "tn-1", "offset": 0, "data": b""}),
    ("device.tunnel.ack", {"channel": "tn-1", "n": 0}),
    ("no.such.method", {}),
]


def test_every_method_has_an_example() -> None:
    assert set(EXAMPLES) == set(METHODS)


@pytest.mark.parametrize("method", sorted(EXAMPLES))
def test_valid_params_and_results_validate_and_travel(method: str) -> None:
    params, result = EXAMPLES[method]
    spec = METHODS[method]
    model = validate_params(method, params)
    assert isinstance(model, spec.params)
    # params survive the wire unchanged
    req = Req(id=new_request_id(), m=method, p=dump(model))
    back = decode(encode(req))
    assert isinstance(back, Req)
    assert validate_params(method, back.params) == model
    res = Res.success(req.id, dump(validate_result(method, result)))
    got = decode(encode(res))
    assert isinstance(got, Res)
    assert validate_result(method, got.unwrap()) == validate_result(method, result)


@pytest.mark.parametrize(("method", "params"), BAD)
def test_invalid_params_are_bad_request(method: str, params: dict[str, Any]) -> None:
    with pytest.raises(RpcError) as info:
        validate_params(method, params)
    assert info.value.code is ErrorCode.BAD_REQUEST
    if method in METHODS:
        assert info.value.data is not None
        assert info.value.data["errors"]
        assert all("input" not in e for e in info.value.data["errors"])
    else:
        assert info.value.data == {"reason": "unknown_method"}


def test_invalid_result_is_internal() -> None:
    with pytest.raises(RpcError) as info:
        validate_result("device.shell", {"stdout": "x"})
    assert info.value.code is ErrorCode.INTERNAL


def test_results_ignore_unknown_keys() -> None:
    model = validate_result("device.shell", {"exit_code": 0, "new_field": 1})
    assert dump(model) == {"exit_code": 0, "stdout": "", "stderr": "", "truncated": False}


def test_apk_hash_is_checked() -> None:
    apk = Apk.from_bytes("test", "t.apk", b"data")
    assert apk.sha256 == hashlib.sha256(b"data").hexdigest()
    with pytest.raises(RpcError):
        validate_result(
            "workspace.compile",
            {"ok": True, "toolchain": "gradle", "apks": [{**dump(apk), "data": b"tampered"}]},
        )


def test_device_bound_and_capabilities() -> None:
    assert METHODS["device.shell"].device_bound
    assert not METHODS["workspace.compile"].device_bound
    assert METHODS["workspace.compile"].capability == "build"
    assert METHODS["device.screenshot"].capability == "devices"
    assert METHODS["ping"].capability is None
    assert not METHODS["device.shell"].idempotent
    assert not METHODS["device.instrument"].idempotent


def test_timeout_for() -> None:
    assert timeout_for("device.shell", DEFAULTS) == DEFAULTS.rpc_timeout_s
    assert timeout_for("workspace.compile", DEFAULTS) == DEFAULTS.rpc_long_timeout_s
    assert timeout_for("unknown", DEFAULTS) == DEFAULTS.rpc_timeout_s
    assert timeout_for("workspace.compile", DEFAULTS, 3.0) == 3.0


def test_register_adds_a_method() -> None:
    class StateParams(Empty):
        serial: str

    class StateResult(BaseModel):
        package: str

    spec = MethodSpec("test.device.state", StateParams, StateResult, "devices")
    try:
        assert register(spec) is spec
        with pytest.raises(ValueError):
            register(spec)
        register(spec, replace=True)
        assert validate_params("test.device.state", {"serial": "s"}) == StateParams(serial="s")
    finally:
        METHODS.pop("test.device.state", None)


def test_log_batch_validates_per_batch() -> None:
    batch = LogBatch(lines=["a", "b"], dropped=3)
    assert parse_log_batch(batch.to_wire()) == batch
    evt = decode(encode_event("logcat-1", 9, batch.to_wire()))
    assert isinstance(evt, Evt)
    assert LogBatch.from_event(evt) == LogBatch(lines=["a", "b"], dropped=3, seq=9)
    end = LogBatch(lines=[], eof=True, reason="device offline")
    assert parse_log_batch(end.to_wire()) == end
    assert parse_log_batch({}) == LogBatch(lines=[])
    for n in (512, 513, 2000):
        assert parse_log_batch({"lines": ["x"] * n}).lines == ["x"] * n
    for bad in [
        None,
        [],
        {"lines": "abc"},
        {"lines": ["a", 1]},
        # Both ways the lines are checked: short batches by joining them, long ones by type.
        {"lines": ["a"] * 511 + [b"bytes"]},
        {"lines": ["a"] * 600 + [None]},
        {"lines": [None] + ["a"] * 600},
        {"lines": [], "dropped": -1},
        {"lines": [], "dropped": True},
        {"lines": [], "eof": 1},
        {"lines": [], "reason": 5},
    ]:
        with pytest.raises(RpcError) as info:
            parse_log_batch(bad)
        assert info.value.code is ErrorCode.BAD_REQUEST


def test_envelope_models_used_by_methods() -> None:
    info = DeviceInfo(serial=SERIAL, state="device", battery=50)
    assert info.profile == "standard"
    with pytest.raises(ValueError):
        DeviceInfo(serial=SERIAL, state="device", battery=101)
    assert Capabilities().methods == []
    caps = Capabilities(devices=True, methods=["device.shell"])
    assert caps.supports("device.shell")
    assert not caps.supports("workspace.compile")


def test_each_method_is_declared_once_as_a_descriptor_under_its_wire_name() -> None:
    import protocol.agent_methods as agent
    import protocol.manage_methods as manage
    import protocol.methods as core
    import protocol.screen_methods as screen
    import protocol.tunnel_methods as tunnel

    declared = [
        value
        for module in (core, agent, manage, screen, tunnel)
        for name, value in vars(module).items()
        if isinstance(value, core.Method) and name.isupper()
    ] + list(agent.ACTIONS.values())
    by_name = {m.name: m for m in declared}
    assert len(by_name) == len({id(m) for m in declared})  # one descriptor per name
    assert set(by_name) == set(core.METHODS)
    assert all(core.METHODS[name] is method for name, method in by_name.items())


def test_a_descriptor_parses_params_and_results_into_its_models() -> None:
    from protocol.methods import INSTALL, InstallParams, InstallResult

    params = INSTALL.parse_params({"serial": "s1", "path": "/tmp/a.apk"})
    assert isinstance(params, InstallParams) and params.path == "/tmp/a.apk"
    with pytest.raises(RpcError) as bad:
        INSTALL.parse_params({"serial": "s1"})  # neither apk nor path
    assert bad.value.code is ErrorCode.BAD_REQUEST
    result = INSTALL.parse_result({"package": "org.x", "newer": 1})
    assert isinstance(result, InstallResult) and result.package == "org.x"
    with pytest.raises(RpcError) as wrong:
        INSTALL.parse_result({"existed": True})
    assert wrong.value.code is ErrorCode.INTERNAL
