"""Ctrl-C and SIGTERM as a request to stop, honoured between polls instead of at a random instruction.

A signal that lands while a round is in flight only sets a flag; the driver polls the round every
100 ms, notices the flag, keeps every finished round, writes its summary and returns at once. So one
press stops a run within a fraction of a second and never tears a half-written row. Before the run
loop starts (and after it ends) there is nothing to protect, and a signal raises at once; a second
signal always does. SIGTERM (what schedulers and `docker stop` send) is treated exactly like SIGINT.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(KeyboardInterrupt):
    """The run was stopped by a signal; `signum` says which (exit code 128 + signum)."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopRequest:
    """Set by a signal handler (or by hand, from another thread); the driver checks it."""

    def __init__(self):
        self._event = threading.Event()
        self.signum: int = signal.SIGINT
        self.deferred = False  # True while the run loop can stop cleanly at its next poll

    def set(self, signum: int = signal.SIGINT) -> None:
        self.signum = signum
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def handle(self, signum, frame) -> None:
        if self.deferred and not self.is_set():
            self.set(signum)
            return
        self.set(signum)
        raise RunInterrupted(signum)

    def install(self) -> None:
        """(Re)install the handlers; Ray's init replaces the SIGTERM handler with its own."""
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                signal.signal(signum, self.handle)


@contextmanager
def stop_on_signals():
    """A StopRequest wired to SIGINT and SIGTERM for the duration (main thread only; elsewhere, e.g.
    in a notebook's worker thread, the request exists but no handler is installed)."""
    stop = StopRequest()
    main = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS} if main else {}
    stop.install()
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
