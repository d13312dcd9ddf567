"""Stop signals as requests: a long job stops at its next safe point, not wherever the signal lands.

Used by training (stop after a step, save a checkpoint), data preparation (stop between
documents, record progress) and ``compare.py`` (the signals it forwards to its runs).
"""

from __future__ import annotations

import os
import signal
import threading


class StopSignals:
    """Turn the first SIGINT (Ctrl-C) or SIGTERM (a scheduler's pre-emption) into a stop request.

    Inside the ``with`` block a signal only sets :attr:`received` (the signal number); the
    caller checks it at its next safe point (the training loop after each optimizer step, data
    preparation after each document), saves what it must and exits non-zero; ``stopping`` is
    what the signal's message says happens next.
    A second signal raises ``KeyboardInterrupt`` at once, for a user who cannot wait.  The
    previous handlers come back on exit.  Handlers can only be installed from the main
    thread; elsewhere this does nothing (signals then keep their default behaviour).
    """

    # SIGHUP too: a closed terminal or ssh session is a stop request, not a reason to lose the step.
    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, stopping: str = "stopping after this step and saving a checkpoint") -> None:
        self.received: int | None = None
        self.stopping = stopping
        self._previous: dict = {}

    def _handle(self, signum, frame) -> None:
        if self.received is not None:
            raise KeyboardInterrupt
        self.received = signum
        try:  # os.write, not print: a handler may run in the middle of another write to stderr
            os.write(
                2,
                f"\n{signal.Signals(signum).name} received: {self.stopping} "
                "(send it again to abort at once)\n".encode(),
            )
        except OSError:  # stderr gone (a hung-up terminal): stopping matters more than saying so
            pass

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                # A signal the parent chose to ignore (nohup, `cmd &` in a script) stays ignored.
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        self._previous.clear()
