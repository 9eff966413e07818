"""The wire bytes of every frame kind, pinned: the envelope's readable attribute names
(``Req.method``, ``Res.result``, ``Evt.channel`` …) never change what goes on the wire, whose
keys stay the short ones of docs/protocol.md (``m``, ``p``, ``r``, ``e``, ``ch``, ``d``).

The expected bytes were captured from the encoder before the attributes were renamed. Each
frame is also decoded back from them, and decodes to an equal frame.
"""

from __future__ import annotations

import pytest

from protocol.codec import decode, encode, encode_event, encode_result
from protocol.envelope import (
    Ack,
    Cancel,
    Capabilities,
    DeviceInfo,
    Evt,
    Frame,
    Hello,
    Ping,
    Req,
    Res,
    SharedSettings,
    Welcome,
)
from protocol.errors import ErrorCode, RpcError

RID = "0b7e4d1c-2f3a-4b5c-8d9e-0123456789ab"
SID = "1c8f5e2d-3a4b-4c6d-9e0f-123456789abc"
_RID_HEX = "d92430623765346431632d326633612d346235632d386439652d303132333435363738396162"
_SID_HEX = "d92431633866356532642d336134622d346336642d396530662d313233343536373839616263"

GOLDEN: dict[str, tuple[Frame, str]] = {
    "req": (
        Req.trusted(id=RID, method="device.shell",
                    params={"serial": "emulator-5554", "argv": ["echo", "hi"]}),
        "84a174a3726571a26964" + _RID_HEX + "a16dac6465766963652e7368656c6ca17082a673657269616c"
        "ad656d756c61746f722d35353534a46172677692a46563686fa26869",
    ),
    "req_empty": (
        Req.trusted(id=RID, method="ping"),
        "84a174a3726571a26964" + _RID_HEX + "a16da470696e67a17080",
    ),
    "res_ok": (
        Res.success(RID, {"exit_code": 0, "stdout": "hi\n", "data": b"\x00\x01"}),
        "83a174a3726573a26964" + _RID_HEX + "a17283a9657869745f636f646500a67374646f7574a36869"
        "0aa464617461c4020001",
    ),
    "res_error": (
        Res.failure(RID, RpcError(ErrorCode.FORBIDDEN, "refused", {"rule": "metacharacter"})),
        "83a174a3726573a26964" + _RID_HEX + "a16583a4636f6465a9666f7262696464656ea76d657373616765"
        "a772656675736564a46461746181a472756c65ad6d657461636861726163746572",
    ),
    "evt": (
        Evt.trusted(channel="lc-1", seq=3, data={"lines": ["a", "b"], "dropped": 0}),
        "84a174a3657674a26368a46c632d31a373657103a16482a56c696e657392a161a162a764726f7070656400",
    ),
    "evt_no_data": (
        Evt.trusted(channel="$devices", seq=0),
        "83a174a3657674a26368a82464657669636573a373657100",
    ),
    "ack": (Ack(ids=[RID]), "82a174a361636ba369647391" + _RID_HEX),
    "cancel": (Cancel(id=RID), "82a174a663616e63656ca26964" + _RID_HEX),
    "ping": (Ping(id="n1"), "82a174a470696e67a26964a26e31"),
    "hello": (
        Hello(session=SID, software="droidwire/1",
              caps=Capabilities(devices=True, methods=["ping"]),
              devices=[DeviceInfo(serial="s1", state="device", sdk=34)], held=[RID]),
        "87a174a568656c6c6fa773657373696f6e" + _SID_HEX + "a8736f667477617265ab64726f69647769"
        "72652f31a870726f746f636f6c01a46361707384a56275696c64c2a764657669636573c3a870726f6a6563"
        "747390a76d6574686f647391a470696e67a7646576696365739185a673657269616ca27331a57374617465"
        "a6646576696365a373646b22a770726f66696c65a87374616e64617264a66c6162656c7390a468656c6491"
        + _RID_HEX,
    ),
    "welcome": (
        Welcome(bridge="pi", session=SID, resumed=True, waiting=[RID],
                settings=SharedSettings(ping_interval_s=10.0, ping_timeout_s=10.0,
                                        max_frame_bytes=1000, logcat_batch_lines=100,
                                        logcat_flush_s=0.1)),
        "87a174a777656c636f6d65a6627269646765a27069a773657373696f6e" + _SID_HEX + "a7726573756d"
        "6564c3a870726f746f636f6c01a777616974696e6791" + _RID_HEX + "a873657474696e677385af7069"
        "6e675f696e74657276616c5f73cb4024000000000000ae70696e675f74696d656f75745f73cb4024000000"
        "000000af6d61785f6672616d655f6279746573cd03e8b26c6f676361745f62617463685f6c696e657364ae"
        "6c6f676361745f666c7573685f73cb3fb999999999999a",
    ),
}

# Frames whose payload holds a model: msgpack cannot pack it, so the encoder takes the
# model_dump way (which must use the wire keys too). Not decoded back (the model is a map then).
_DEVICE_HEX = "81a664657669636584a673657269616ca27331a57374617465a6646576696365a770726f66696c65a8" \
    "7374616e64617264a66c6162656c7390"
DUMPED: dict[str, tuple[Frame, str]] = {
    "res_model": (
        Res(id=RID, result={"device": DeviceInfo(serial="s1", state="device")}),
        "83a174a3726573a26964" + _RID_HEX + "a172" + _DEVICE_HEX,
    ),
    "req_model": (
        Req(id=RID, method="x.y", params={"device": DeviceInfo(serial="s1", state="device")}),
        "84a174a3726571a26964" + _RID_HEX + "a16da3782e79a170" + _DEVICE_HEX,
    ),
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_each_frame_encodes_to_its_golden_bytes_and_back(name: str) -> None:
    frame, expected = GOLDEN[name]
    data = encode(frame)
    assert data.hex() == expected
    assert decode(bytes.fromhex(expected)) == frame


@pytest.mark.parametrize("name", sorted(DUMPED))
def test_payloads_msgpack_cannot_pack_still_go_out_under_the_wire_keys(name: str) -> None:
    frame, expected = DUMPED[name]
    assert encode(frame).hex() == expected


def test_the_hot_path_encoders_give_the_same_bytes() -> None:
    assert encode_event("lc-1", 3, {"lines": ["a", "b"], "dropped": 0}).hex() == GOLDEN["evt"][1]
    assert encode_result(RID, {"exit_code": 0, "stdout": "hi\n", "data": b"\x00\x01"}).hex() \
        == GOLDEN["res_ok"][1]


def test_a_peer_must_use_the_wire_keys_not_the_attribute_names() -> None:
    import msgpack

    from protocol.errors import DecodeError

    spelled_out = msgpack.packb({"t": "req", "id": RID, "method": "ping", "params": {}})
    with pytest.raises(DecodeError):
        decode(spelled_out)
