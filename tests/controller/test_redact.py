"""Access-log redaction of tokens a client wrongly put in the URL."""

from __future__ import annotations

import logging

from controller.redact import RedactQuerySecrets, redact_url


def test_token_like_parameters_are_masked_and_others_kept() -> None:
    assert redact_url("/v1/tokens?token=dw_u_secret&n=1") == "/v1/tokens?token=[redacted]&n=1"
    assert "secret" not in redact_url("/x?ACCESS_TOKEN=secret&api_key=secret2")
    assert redact_url("/v1/devices?lines=10") == "/v1/devices?lines=10"
    assert redact_url("/v1/devices") == "/v1/devices"


def test_filter_rewrites_uvicorn_access_arguments() -> None:
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1,
                               '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:1", "GET", "/v1/x?token=dw_u_abc", "1.1", 400), None)
    assert RedactQuerySecrets().filter(record) is True
    assert "dw_u_abc" not in record.getMessage()
    assert "/v1/x?token=" in record.getMessage()
