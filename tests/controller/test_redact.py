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


def test_uvicorn_formats_access_records_made_while_every_record_is_redacted() -> None:
    """The redacting record factory keeps an access record's arguments a tuple, masking the
    secret inside it: uvicorn's access formatter unpacks them (a flattened record made every
    access-log line a "--- Logging error ---" traceback)."""
    from uvicorn.logging import AccessFormatter

    from protocol import redact

    redact.install()
    record = logging.getLogger("uvicorn.access").makeRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:1", "GET", "/v1/x?access_token=abcdefgh12345678&n=1", "1.1", 200), None)
    line = AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s',
                           use_colors=False).format(record)
    assert line.startswith('127.0.0.1:1 - "GET /v1/x?'), line
    assert "abcdefgh12345678" not in line and "n=1" in line and "200" in line
    plain = logging.getLogger("uvicorn.access").makeRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:1", "GET", "/v1/runs/abc", "1.1", 200), None)
    assert AccessFormatter("%(request_line)s", use_colors=False).format(plain) \
        == "GET /v1/runs/abc HTTP/1.1"
