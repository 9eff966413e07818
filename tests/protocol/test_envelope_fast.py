"""The hot-path helpers of the envelope agree with the slow, obvious ways."""

from __future__ import annotations

import uuid

import pytest

from protocol.envelope import (
    Ack,
    ErrorBody,
    Evt,
    Hello,
    Req,
    Res,
    is_request_id,
    new_request_id,
)


def test_new_request_ids_are_canonical_uuid4_and_distinct() -> None:
    ids = [new_request_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for rid in ids:
        parsed = uuid.UUID(rid)
        assert parsed.version == 4 and str(parsed) == rid
        assert is_request_id(rid)


@pytest.mark.parametrize(
    "value",
    [
        # Fixed values (not generated), so every pytest worker collects the same test ids.
        "5FBF9DA2-AAE4-45CC-8148-951175B2C586",  # upper case
        "a24d30bc-eda1-11f1-8d45-02fc00000001",  # version 1
        "c2cad549349c49eab5b6ec6efb4313a7",  # hex without dashes
        "{4ed6e8f4-fa86-4095-b4b9-6947e6256ba5}",  # braces
        "7e7f3548-035b-4155-981e-59978fe29553\n",  # a trailing newline
        "376541d8-189e-4033-cd59-2c4fd9a7134a",  # not the RFC 4122 variant
        "",
        None,
    ],
)
def test_only_canonical_uuid4_strings_are_request_ids(value: object) -> None:
    assert not is_request_id(value)


def test_trusted_builds_what_model_construct_builds() -> None:
    rid = new_request_id()
    cases = [
        (Req, {"id": rid, "method": "ping", "params": {"payload": b"x"}}),
        (Req, {"id": rid, "method": "ping"}),
        (Res, {"id": rid, "result": {"a": None}}),
        (Res, {"id": rid, "error": ErrorBody(code="busy", message="later")}),
        (Ack, {"ids": [rid]}),
        (Evt, {"channel": "c1", "seq": 7, "data": {"lines": ["l"]}}),
        (Hello, {"session": rid, "software": "t"}),
    ]
    for cls, values in cases:
        fast, slow = cls.trusted(**values), cls.model_construct(**values)  # type: ignore[attr-defined]
        assert fast == slow
        assert fast.model_dump() == slow.model_dump()
        assert fast.model_fields_set == slow.model_fields_set
        assert repr(fast) == repr(slow)


def test_trusted_defaults_from_factories_are_fresh_and_frozen() -> None:
    a = Req.trusted(id=new_request_id(), method="ping")
    b = Req.trusted(id=new_request_id(), method="ping")
    assert a.params == {} and a.params is not b.params
    with pytest.raises(ValueError):
        a.method = "other"  # type: ignore[misc]
