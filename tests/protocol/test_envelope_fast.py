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
        str(uuid.uuid4()).upper(),
        str(uuid.uuid1()),
        uuid.uuid4().hex,
        "{" + str(uuid.uuid4()) + "}",
        str(uuid.uuid4()) + "\n",
        str(uuid.uuid4())[:19] + "c" + str(uuid.uuid4())[20:],  # not the RFC 4122 variant
        "",
        None,
    ],
)
def test_only_canonical_uuid4_strings_are_request_ids(value: object) -> None:
    assert not is_request_id(value)


def test_trusted_builds_what_model_construct_builds() -> None:
    rid = new_request_id()
    cases = [
        (Req, {"id": rid, "m": "ping", "p": {"payload": b"x"}}),
        (Req, {"id": rid, "m": "ping"}),
        (Res, {"id": rid, "r": {"a": None}}),
        (Res, {"id": rid, "e": ErrorBody(code="busy", message="later")}),
        (Ack, {"ids": [rid]}),
        (Evt, {"ch": "c1", "seq": 7, "d": {"lines": ["l"]}}),
        (Hello, {"session": rid, "software": "t"}),
    ]
    for cls, values in cases:
        fast, slow = cls.trusted(**values), cls.model_construct(**values)  # type: ignore[attr-defined]
        assert fast == slow
        assert fast.model_dump() == slow.model_dump()
        assert fast.model_fields_set == slow.model_fields_set
        assert repr(fast) == repr(slow)


def test_trusted_defaults_from_factories_are_fresh_and_frozen() -> None:
    a = Req.trusted(id=new_request_id(), m="ping")
    b = Req.trusted(id=new_request_id(), m="ping")
    assert a.p == {} and a.p is not b.p
    with pytest.raises(ValueError):
        a.m = "other"  # type: ignore[misc]
