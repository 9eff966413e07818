"""protocol.redact: every record of every logger is redacted when it is made."""

from __future__ import annotations

import logging

import pytest

from protocol import redact


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("> Authorization: Bearer dw_b_abcdefghijklmnopqrstuvwxyz012345", "dw_b_abcdefghijklmnop"),
        ("authorization: Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==", "QWxhZGRpbjpvcGVu"),
        ('"WebSocket /v1/devices/x/logcat/stream?token=s3cr3t-value-xyz" 403', "s3cr3t-value"),
        ("GET /v1/devices?n=1&access_token=abcdefgh12345678 HTTP/1.1", "abcdefgh12345678"),
        ("using token dw_u_Zm9vYmFyYmF6cXV4cXV1eDEyMzQ1Njc4", "dw_u_Zm9vYmFy"),
        ("cookie: droidwire_session=abcdefghijklmnop", "abcdefghijklmnop"),
    ],
)
def test_secrets_are_masked(text: str, secret: str) -> None:
    clean = redact.redact(text)
    assert secret not in clean
    assert redact.MASK in clean


def test_a_registered_secret_without_prefix_is_masked_in_any_logger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    redact.add_secret("my-bootstrap-secret-0123456789")
    redact.install()
    redact.install()  # idempotent
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("websockets.server").debug("< %s: %s", "x-admin",
                                                     "my-bootstrap-secret-0123456789")
        try:
            raise ValueError("boom my-bootstrap-secret-0123456789")
        except ValueError:
            logging.getLogger("some.library").exception("failed")
    text = caplog.text
    assert "my-bootstrap-secret" not in text
    assert text.count(redact.MASK) >= 2


def test_ordinary_text_is_left_alone() -> None:
    line = "bridge pi connected (session 1234, new, 3 devices) GET /v1/devices?n=5"
    assert redact.redact(line) == line
