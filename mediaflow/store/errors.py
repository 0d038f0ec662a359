"""The store's typed exceptions."""

from __future__ import annotations

import errno
import os
from pathlib import Path

_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
# A file that may not grow further (the filesystem's largest file, or the process's
# RLIMIT_FSIZE): the store cannot hold this artifact, like a full disk.
_TOO_LARGE = frozenset({errno.EFBIG})


class ArtifactNotFound(KeyError):
    """No artifact is stored under this digest."""

    def __init__(self, digest: str, *, where: str = "the store") -> None:
        """``where`` names the place looked in, for the message (a service's URL)."""
        super().__init__(digest)
        self.digest = digest
        self.where = where

    def __str__(self) -> str:
        # KeyError's own __str__ would print the repr of the digest in quotes.
        return f"no artifact {self.digest} in {self.where}"


class StoreFull(OSError):
    """The disk (or quota) ran out while saving; nothing partial was left behind.

    ``errno`` is ``ENOSPC``, ``EDQUOT`` or ``EFBIG`` (a file size limit: the
    filesystem's, or the process's ``RLIMIT_FSIZE``); ``filename`` is the store
    directory (or, for a full artifact service, the URL that answered 507).
    """


def raise_if_full(exc: BaseException, where: Path) -> None:
    """Turn ENOSPC/EDQUOT/EFBIG into :class:`StoreFull`; return for anything else."""
    if not isinstance(exc, OSError) or isinstance(exc, StoreFull):
        return
    code = exc.errno
    if code in _DISK_FULL:
        what, advice = "artifact store full", "free space or lower ARTIFACT_MAX_BYTES"
    elif code in _TOO_LARGE:
        what, advice = "artifact too large for the store", "raise the file size limit"
    else:
        return
    raise StoreFull(
        code,
        f"{what} ({errno.errorcode[code]}: {os.strerror(code)});"
        f" the partial artifact was removed, {advice}",
        str(where),
    ) from exc


class RemoteStoreError(OSError):
    """The artifact service refused a request or answered something unusable.

    ``url`` is the request's URL; ``status`` the HTTP status (None when there was
    no answer). A full service is :class:`StoreFull` instead, an artifact it does
    not have :class:`ArtifactNotFound`.
    """

    def __init__(self, message: str, *, url: str, status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


class StoreUnreachable(RemoteStoreError):
    """No answer from the artifact service after every retry (refused, reset, timed out)."""
