"""The store's typed exceptions."""

from __future__ import annotations

import errno
import os
from pathlib import Path

_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


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

    ``errno`` is ``ENOSPC`` or ``EDQUOT``; ``filename`` is the store directory (or,
    for a full artifact service, the URL that answered 507).
    """


def raise_if_full(exc: BaseException, where: Path) -> None:
    """Turn ENOSPC/EDQUOT into :class:`StoreFull`; return for anything else."""
    if isinstance(exc, OSError) and not isinstance(exc, StoreFull) and exc.errno in _DISK_FULL:
        code = exc.errno
        raise StoreFull(
            code,
            f"artifact store full ({errno.errorcode[code]}: {os.strerror(code)});"
            " the partial artifact was removed, free space or lower ARTIFACT_MAX_BYTES",
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
