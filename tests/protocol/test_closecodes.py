from __future__ import annotations

import pytest

from protocol.closecodes import CloseClass, CloseCode, classify, describe, is_terminal

T, R = CloseClass.TERMINAL, CloseClass.RETRYABLE


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (None, R),  # network error, no close frame at all
        (1000, R),
        (1001, R),
        (1002, R),
        (1006, R),
        (1009, R),
        (1011, R),
        (1012, R),
        (1013, R),
        (4000, R),
        (4399, R),
        (4400, T),
        (4401, T),
        (4403, T),
        (4409, T),
        (4426, T),
        (4404, T),  # unknown code in the client-error family
        (4499, T),
        (4500, R),
        (4999, R),
        (3000, R),
    ],
)
def test_classifier_table(code: int | None, expected: CloseClass) -> None:
    assert classify(code) is expected
    assert is_terminal(code) is (expected is T)


def test_named_codes_have_the_contract_values() -> None:
    assert CloseCode.GOING_AWAY == 1001
    assert CloseCode.SERVICE_RESTART == 1012
    assert CloseCode.BAD_REQUEST == 4400
    assert CloseCode.UNAUTHORIZED == 4401
    assert CloseCode.FORBIDDEN == 4403
    assert CloseCode.REPLACED == 4409


def test_every_named_code_has_a_description() -> None:
    for code in CloseCode:
        text = describe(code)
        assert text.startswith(str(int(code)))
        assert "unknown close code" not in text and "unknown client error" not in text
    assert describe(None) == "connection lost (no close code)"
    assert describe(4498) == "4498 unknown client error"
    assert describe(4100) == "4100 unknown close code"
