from __future__ import annotations

import pytest

from controller.store import UnsupportedDatabase, to_async_url


@pytest.mark.parametrize(
    ("plain", "mapped"),
    [
        ("sqlite:///relative.db", "sqlite+aiosqlite:///relative.db"),
        ("sqlite:////abs/path/c.db", "sqlite+aiosqlite:////abs/path/c.db"),
        ("sqlite://", "sqlite+aiosqlite://"),
        ("postgresql://u@db:5432/dw", "postgresql+asyncpg://u@db:5432/dw"),
        ("postgres://u@db/dw", "postgresql+asyncpg://u@db/dw"),
        ("postgresql+asyncpg://u@db/dw", "postgresql+asyncpg://u@db/dw"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite:///x.db"),
    ],
)
def test_plain_urls_map_to_async_drivers(plain: str, mapped: str) -> None:
    assert to_async_url(plain).render_as_string(hide_password=False) == mapped


def test_password_survives_mapping() -> None:
    url = to_async_url("postgresql://u:s3cret@db/dw")
    assert url.password == "s3cret"
    assert "s3cret" not in repr(url)


@pytest.mark.parametrize(
    "url", ["mysql://u@db/dw", "postgresql+psycopg2://u@db/dw", "not a url", "", "http://x"]
)
def test_unsupported_urls_are_refused(url: str) -> None:
    with pytest.raises(UnsupportedDatabase):
        to_async_url(url)


def test_refusal_does_not_echo_a_password() -> None:
    with pytest.raises(UnsupportedDatabase) as info:
        to_async_url("mysql://u:hunter22@db/dw")
    assert "hunter22" not in str(info.value)
