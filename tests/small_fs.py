"""A small real filesystem for tests that fill a disk (``tests/test_full_disk*.py``).

:func:`small_fs` mounts one under a temp directory and unmounts it on the way
out, whatever happened in between:

* ``"tmpfs"`` (the default): ``mount -t tmpfs -o size=...``. No image, no
  mkfs; space is counted in whole pages, freed at once on unlink.
* ``"ext4"``: a sparse image (``truncate``), ``mkfs.ext4 -q`` and
  ``mount -o loop``: a disk filesystem, with its journal and delayed allocation.

Both need root (CI runs as root). Where mounting is refused (not root, no loop
device, a sandbox without the capability) the ``small_fs`` fixture skips with
the reason, and in CI (``CI`` set, see ``tests/ci_skips.py``) it fails with
that reason instead: a full-disk test that cannot get a disk must not pass
quietly. What needs no privilege is the ``RLIMIT_FSIZE`` fallback,
:func:`run_with_fsize_limit`: a child process whose files cannot grow past a
limit (``EFBIG`` rather than ``ENOSPC``).

Filling is exact, not approximate: :func:`fill` sizes a filler file from
``os.statvfs`` so that a chosen number of bytes stays free (a flow's node may
call it, to fill the disk at a chosen point of a run), and :func:`make_room`
deletes the fillers again ("space returns").
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from tests.ci_skips import in_ci

FsKind = Literal["tmpfs", "ext4"]
MiB = 1 << 20
FILLER_PREFIX = "filler-"
UMOUNT_TRIES = 50  # x 0.1 s: a busy mount (a file still open) gets five seconds to let go


class MountRefused(RuntimeError):
    """This machine will not mount a small filesystem for us; the message says why."""


@dataclass(frozen=True)
class SmallFs:
    """A mounted small filesystem: ``root`` is its mount point (empty but for ext4's
    ``lost+found``); :meth:`data_dir` is a fresh directory on it."""

    root: Path
    kind: FsKind
    size: int

    def data_dir(self, name: str = "data") -> Path:
        path = self.root / name
        path.mkdir(exist_ok=True)
        return path

    def free_bytes(self) -> int:
        return free_bytes(self.root)

    def block_size(self) -> int:
        return os.statvfs(self.root).f_frsize

    def fill(self, leave: int = 0) -> list[Path]:
        """See :func:`fill`."""
        return fill(self.root, leave)

    def make_room(self) -> int:
        """See :func:`make_room`."""
        return make_room(self.root)


def _system_tool(name: str) -> str | None:
    """``name`` on PATH or in the system directories a root shell has on its PATH
    (a caller with ``PATH=/usr/bin:/bin`` still finds ``/usr/sbin/mkfs.ext4``)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return shutil.which(name, path=path)


def free_bytes(root: Path) -> int:
    """Bytes an unprivileged write may still take under ``root`` (``f_bavail``; as
    root, ext4's reserved blocks would be usable too, so images are made with none)."""
    stats = os.statvfs(root)
    return stats.f_bavail * stats.f_frsize


def fill(root: Path, leave: int = 0) -> list[Path]:
    """Take all free space under ``root`` but ``leave`` bytes (rounded down to whole
    blocks) with new filler files; return them. Blocking; any process may call it.

    The fillers are allocated (``posix_fallocate``), not sparse, and the result is
    checked against ``statvfs``: a filesystem that kept more free (metadata blocks)
    gets the difference in another filler. Only what is free *now* is taken: a file
    another process is still writing and then deletes gives its blocks back later,
    so fill from the writer's side (between its writes) when that matters.
    """
    block = os.statvfs(root).f_frsize
    leave = leave // block * block
    made = []
    for _ in range(4):
        take = free_bytes(root) - leave
        if take <= 0:
            break
        made.append(_add_filler(root, take, block))
    free = free_bytes(root)
    if free > leave:
        raise AssertionError(f"could not fill {root}: {free} bytes free, wanted {leave}")
    return made


def _add_filler(root: Path, size: int, block: int) -> Path:
    path = root / f"{FILLER_PREFIX}{uuid.uuid4().hex[:12]}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        # ext4 spends blocks on the extent tree too: shrink the ask until it fits.
        while size > 0:
            try:
                os.posix_fallocate(fd, 0, size)
                break
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                size -= block
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def make_room(root: Path) -> int:
    """Delete every filler under ``root``, whoever made it ("space returns"); return
    the bytes free afterwards."""
    for path in root.glob(f"{FILLER_PREFIX}*"):
        path.unlink(missing_ok=True)
    os.sync()  # ext4 hands freed blocks back when its journal commits
    return free_bytes(root)


def mount_refusal() -> str | None:
    """Why this process cannot mount a small filesystem (None: it may try)."""
    if not sys.platform.startswith("linux"):
        return f"small filesystems are mounted on Linux only, not {sys.platform}"
    if os.geteuid() != 0:
        return f"mounting a small filesystem needs root (euid {os.geteuid()})"
    if _system_tool("mount") is None or _system_tool("umount") is None:
        return "mount/umount are not installed"
    return None


@contextlib.contextmanager
def small_fs(
    size: int = 8 * MiB, kind: FsKind = "tmpfs", *, parent: Path | None = None
) -> Iterator[SmallFs]:
    """Mount a ``size``-byte filesystem of ``kind`` on a new directory under ``parent``
    (the system temp dir by default) and yield it; unmount and remove it afterwards,
    also when the body raised. Raises :class:`MountRefused` if it cannot be mounted."""
    refusal = mount_refusal()
    if refusal is not None:
        raise MountRefused(refusal)
    base = Path(tempfile.mkdtemp(prefix=f"small-{kind}-", dir=parent))
    root = base / "mnt"
    root.mkdir()
    image = base / "fs.img"
    try:
        if kind == "tmpfs":
            _run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(root)])
        else:
            _make_ext4(image, size)
            _run(["mount", "-o", "loop", str(image), str(root)])
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    try:
        yield SmallFs(root, kind, size)
    finally:
        try:
            unmount(root)
        finally:
            if not os.path.ismount(root):
                shutil.rmtree(base, ignore_errors=True)


def _make_ext4(image: Path, size: int) -> None:
    mkfs = _system_tool("mkfs.ext4")
    if mkfs is None:
        raise MountRefused("mkfs.ext4 is not installed (e2fsprogs)")
    with open(image, "wb") as out:
        out.truncate(size)  # sparse: the image costs the host nothing until written
    # -m 0: no blocks reserved for root, so statvfs's f_bavail is what root can write.
    _run([mkfs, "-q", "-F", "-m", "0", str(image)])


def _run(argv: list[str]) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MountRefused(f"{' '.join(argv)}: {exc}") from exc
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()
        raise MountRefused(f"{' '.join(argv)} failed ({done.returncode}): {said}")


def unmount(root: Path) -> None:
    """Unmount ``root``, waiting while it is busy (a worker thread still closing a
    file); past :data:`UMOUNT_TRIES` detach it lazily and raise, naming the files
    this process still holds there, so a leak is reported rather than left."""
    if not os.path.ismount(root):
        return
    said = ""
    for attempt in range(UMOUNT_TRIES):
        done = subprocess.run(["umount", str(root)], capture_output=True, text=True, check=False)
        if done.returncode == 0:
            return
        said = done.stderr.strip()
        if attempt == 0:
            # A failed test's traceback may be all that keeps a closed file alive.
            gc.collect()
        time.sleep(0.1)
    held = open_files_under(root)
    subprocess.run(["umount", "-l", str(root)], capture_output=True, check=False)
    raise AssertionError(f"{root} stayed busy (detached lazily): {said}; open here: {held}")


def open_files_under(root: Path) -> list[str]:
    """The files under ``root`` this process has open (Linux: ``/proc/self/fd``)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # an fd closed while we looked
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(f"{root}/"):
                held.append(target)
    return sorted(held)


@pytest.fixture(name="small_fs")
def small_fs_fixture(tmp_path: Path) -> Iterator[SmallFs]:
    """An 8 MiB tmpfs, unmounted after the test. Skips where mounting is refused,
    and fails with the reason in CI."""
    with mounted_or_skip(tmp_path, "tmpfs") as fs:
        yield fs


@contextlib.contextmanager
def mounted_or_skip(parent: Path, kind: FsKind = "tmpfs", size: int = 8 * MiB) -> Iterator[SmallFs]:
    """:func:`small_fs`, skipping (failing in CI) with the reason when refused."""
    with contextlib.ExitStack() as stack:
        try:
            fs = stack.enter_context(small_fs(size, kind, parent=parent))
        except MountRefused as exc:
            reason = f"no small {kind} filesystem here: {exc}"
            if in_ci():
                pytest.fail(f"{reason} (CI must run the full-disk tests: run them as root)")
            pytest.skip(reason)
        yield fs


# -- the unprivileged fallback: a file size limit ---------------------------------------------


def run_with_fsize_limit(
    code: str, limit: int, *, cwd: Path, timeout: float = 30.0
) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code`` in a child whose files cannot grow past ``limit`` bytes.

    ``RLIMIT_FSIZE`` makes a write that crosses the limit short and the next one
    fail with ``EFBIG``, once ``SIGXFSZ`` (which would kill the child) is ignored.
    The child sets both itself, before ``code`` runs (no ``preexec_fn``: this
    process has threads). Needs no privilege; the child gets this ``sys.path``.
    """
    limited = (
        "import resource, signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run(
        [sys.executable, "-c", limited + code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
