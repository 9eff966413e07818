"""The tests' ``free_port()``: ports outside the kernel's ephemeral range, one slice per xdist
worker, a different one at each call, never one in use."""

from __future__ import annotations

import socket

import pytest

from tests import adb_support
from tests.adb_support import PORT_BASE, PORT_SLICE, free_port


def test_ports_are_below_the_ephemeral_range_and_distinct() -> None:
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == 20
    assert all(PORT_BASE <= p < 32768 for p in ports)


def test_each_worker_has_its_own_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adb_support, "_cursor", 0)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    port = free_port()
    assert PORT_BASE + 3 * PORT_SLICE <= port < PORT_BASE + 4 * PORT_SLICE


def test_a_port_in_use_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adb_support, "_cursor", 0)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw5")
    base = PORT_BASE + 5 * PORT_SLICE
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base))
        taken.listen(1)
        assert free_port() != base
