"""Database URLs: users write plain ones, SQLAlchemy's async engine needs a driver.

``sqlite:///path`` becomes ``sqlite+aiosqlite:///path`` and ``postgresql://…`` (or the
``postgres://`` spelling Heroku-style platforms hand out) becomes ``postgresql+asyncpg://…``.
A URL that already names one of those async drivers passes through unchanged; anything else
is refused with :class:`UnsupportedDatabase` so a typo fails at start, not at first query.
"""

from __future__ import annotations

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

__all__ = ["UnsupportedDatabase", "is_sqlite", "to_async_url"]

_ASYNC_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
}


class UnsupportedDatabase(ValueError):
    """A database URL this controller cannot use."""

    def __init__(self, url: str, reason: str):
        self.url = url
        self.reason = reason
        super().__init__(f"unsupported database URL {url!r}: {reason}")


def to_async_url(url: str) -> URL:
    """Map a plain database URL onto its async driver (see the module docstring)."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise UnsupportedDatabase(_redact(url), "not a URL") from exc
    driver = _ASYNC_DRIVERS.get(parsed.drivername)
    if driver is None:
        raise UnsupportedDatabase(
            parsed.render_as_string(hide_password=True),
            "use sqlite:///PATH or postgresql://USER@HOST/DB",
        )
    return parsed.set(drivername=driver)


def is_sqlite(url: URL) -> bool:
    return url.get_backend_name() == "sqlite"


def _redact(url: str) -> str:
    # An unparsable URL may still hold a password: keep only the scheme.
    scheme, sep, _ = url.partition("://")
    return f"{scheme}{sep}…" if sep else "…"
