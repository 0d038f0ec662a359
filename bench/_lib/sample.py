"""One sample of a running ``mediaflow run``: memory, descriptors, disk, queue.

Everything comes from outside the process, as an operator would look: ``/proc/PID``
and its children's (the speech host processes)
(``VmRSS`` and ``Threads`` from ``status``, CPU time from ``stat``, one entry per
open descriptor in ``fd``), a walk of the data directory (the sum of file sizes:
the artifacts, and everything else, i.e. the SQLite files and their WALs) and one
scrape of the server's ``/metrics`` (queue backlog, items acked, transcripts,
artifacts evicted under the cap). A scrape that fails leaves its fields None.
"""

from __future__ import annotations

import os
import re
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
METRIC_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


@dataclass(frozen=True)
class Sample:
    """What one look at the process found; ``t`` is seconds since it began serving."""

    t: float
    rss: int  # bytes
    fds: int
    threads: int
    cpu_s: float  # user + system, since the process started
    disk: int  # bytes of every file under the data directory
    artifacts: int  # bytes of the artifact files
    backlog: int | None  # unacked items, every stream
    acked: int | None  # items acknowledged since the run began
    transcripts: int | None  # ``transcript`` events (partials and finals)
    evicted: int | None  # artifacts evicted under the cap or by retention

    @property
    def other(self) -> int:
        """Bytes that are not artifact files: the databases, their WALs, temp files."""
        return self.disk - self.artifacts

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def proc_status(pid: int) -> dict[str, str]:
    """``/proc/PID/status`` as a dict (raises ``OSError`` once the process is gone)."""
    fields: dict[str, str] = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        # The command name may hold spaces: the fields after its ")" are fixed.
        after = fh.read().rsplit(")", 1)[1].split()
    return (int(after[11]) + int(after[12])) / CLOCK_TICKS  # utime, stime


def tree_bytes(root: Path) -> int:
    """Sum of the sizes of the files under ``root`` (files removed mid-walk count 0)."""
    total = 0
    for directory, _dirs, names in os.walk(root):
        for name in names:
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except FileNotFoundError:
                continue
    return total


def scrape(url: str, timeout_s: float = 10.0) -> dict[str, float] | None:
    """``/metrics`` as ``{"name{labels}": value}``; None if the server did not answer."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=timeout_s) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    values: dict[str, float] = {}
    for line in text.splitlines():
        found = METRIC_LINE.match(line)
        if found and not line.startswith("#"):
            values[found.group(1) + (found.group(2) or "")] = float(found.group(3))
    return values


def metric_sum(metrics: dict[str, float] | None, name: str, label: str = "") -> int | None:
    """The sum of ``name``'s series (those whose labels contain ``label``)."""
    if metrics is None:
        return None
    return int(
        sum(
            value
            for key, value in metrics.items()
            if key.partition("{")[0] == name and label in key
        )
    )


def children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (a flow's speech hosts)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == pid:
            found.append(int(entry))
    return found


def take_sample(
    pid: int, data_dir: Path, url: str | None, t: float, *, hosts: bool = True
) -> Sample:
    """Look at process ``pid``, its children (the speech hosts: their memory is the
    flow's too) and ``data_dir`` now. Raises ``OSError`` if ``pid`` is gone."""
    status = proc_status(pid)
    rss = int(status["VmRSS"].split()[0]) * 1024
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    threads = int(status["Threads"])
    cpu = cpu_seconds(pid)
    for child in children(pid) if hosts else []:
        try:
            child_status = proc_status(child)
            rss += int(child_status["VmRSS"].split()[0]) * 1024
            fds += len(os.listdir(f"/proc/{child}/fd"))
            threads += int(child_status["Threads"])
            cpu += cpu_seconds(child)
        except (OSError, KeyError):
            continue  # it ended between the listing and the look
    metrics = scrape(url) if url else None
    return Sample(
        t=t,
        rss=rss,
        fds=fds,
        threads=threads,
        cpu_s=cpu,
        disk=tree_bytes(data_dir),
        artifacts=tree_bytes(data_dir / "artifacts"),
        backlog=metric_sum(metrics, "mediaflow_queue_backlog_items"),
        acked=metric_sum(metrics, "mediaflow_queue_acked_total"),
        transcripts=metric_sum(metrics, "mediaflow_events_total", 'type="transcript"'),
        evicted=metric_sum(metrics, "mediaflow_gc_evicted_total"),
    )


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its live children. Raises ``OSError`` if ``pid`` is gone."""
    total = cpu_seconds(pid)
    for child in children(pid):
        try:
            total += cpu_seconds(child)
        except FileNotFoundError:
            continue
    return total


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    with open("/proc/stat") as fh:
        fields = [float(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    total = sum(fields[:8])
    return (total - idle) / CLOCK_TICKS, total / CLOCK_TICKS
