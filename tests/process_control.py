"""Stopping the real servers tests start (Redis, the RTSP cameras), one way for all."""

from __future__ import annotations

import signal
import subprocess


def end_process(process: subprocess.Popen[bytes], sig: signal.Signals, timeout_s: float) -> None:
    """Send ``sig`` (and SIGCONT, so a stopped process acts on it) unless ``process``
    already exited, wait up to ``timeout_s``, then SIGKILL it and reap it."""
    if process.poll() is not None:
        return
    process.send_signal(sig)
    process.send_signal(signal.SIGCONT)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
