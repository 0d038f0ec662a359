"""A long command's progress on stderr: at most one line a second, rewritten in place
on a terminal, a line of its own in a log (``-v``); :meth:`ProgressLine.finish` ends it.
The command says what a step of progress reads as (``describe``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, TextIO, TypeVar

P = TypeVar("P")


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


class ProgressLine(Generic[P]):
    """A progress callback (see the module doc): ``describe(progress)`` and the
    seconds since the start."""

    def __init__(
        self,
        stream: TextIO,
        describe: Callable[[P], str],
        *,
        enabled: bool,
        every_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.describe = describe
        self.enabled = enabled
        self.every_s = every_s
        self._clock = clock
        self._tty = is_terminal(stream)
        self._started = self._last = clock()
        self._shown = False

    def __call__(self, progress: P) -> None:
        if not self.enabled:
            return
        now = self._clock()
        if now - self._last < self.every_s:
            return
        self._last = now
        line = f"{self.describe(progress)} ({now - self._started:.0f} s)"
        self.stream.write(f"\r{line}\x1b[K" if self._tty else line + "\n")
        self.stream.flush()
        self._shown = True

    def finish(self) -> None:
        if self._shown and self._tty:
            self.stream.write("\n")
            self.stream.flush()
        self._shown = False
