"""Ctrl-C in ``droidwire device logcat -f``: a flag read between messages, never an exception
raised in the middle of websockets (which could leave its message queue's lock held and hang
the process in its closing handshake)."""

from __future__ import annotations

import os
import signal
import threading

from droidwire.device import _ctrl_c


def test_ctrl_c_sets_the_flag_instead_of_raising_and_the_old_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGINT)
    with _ctrl_c() as pressed:
        assert not pressed()
        os.kill(os.getpid(), signal.SIGINT)  # handled in this thread, at the next bytecode
        for _ in range(1000):
            if pressed():
                break
        assert pressed()
    assert signal.getsignal(signal.SIGINT) is before


def test_off_the_main_thread_signals_are_left_alone() -> None:
    seen: list[object] = []

    def run() -> None:
        with _ctrl_c() as pressed:
            seen.append(signal.getsignal(signal.SIGINT))
            seen.append(pressed())

    before = signal.getsignal(signal.SIGINT)
    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    assert seen == [before, False]
