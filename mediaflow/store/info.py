"""What the artifact store takes and tells, shared by its local and remote faces.

What :meth:`~mediaflow.store.ArtifactStore.save` accepts (:data:`Source`), what
:meth:`~mediaflow.store.ArtifactStore.stat` answers (:class:`ArtifactInfo`), the
kinds of keep (:data:`KEEP_KINDS`), and the checks every method makes of the
references and meta it is given (:func:`digest_of`, :func:`copy_meta`). Pure.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

from mediaflow.media import MediaError, MediaRef, check_digest
from mediaflow.store.streams import Chunk

SyncSource: TypeAlias = Chunk | str | os.PathLike[str] | Iterable[Chunk]
Source: TypeAlias = SyncSource | AsyncIterable[Chunk]

DIGEST_LEN = len("sha256:") + 64
KeepKind: TypeAlias = Literal["recording", "hold"]
KEEP_KINDS: tuple[KeepKind, ...] = ("recording", "hold")


@dataclass(frozen=True)
class ArtifactInfo:
    """What the store knows about one artifact. ``created_at`` is epoch seconds."""

    digest: str
    size: int
    media_type: str
    created_at: float
    path: Path
    saved_at: float | None = None  # the latest save of these bytes; None: no row

    def to_ref(self, meta: Mapping[str, Any] | None = None) -> MediaRef:
        return MediaRef(self.digest, self.media_type, self.size, dict(meta or {}))


def copy_meta(meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """A reference's ``meta`` as a dict of its own. Raises ``TypeError`` for a non-mapping."""
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise TypeError(f"meta must be a mapping, got {type(meta).__name__}")
    return dict(meta)


def digest_of(ref: MediaRef | str) -> str:
    """The digest a reference (or a digest string) names. Raises :class:`MediaError`
    for a malformed one."""
    digest = ref.digest if isinstance(ref, MediaRef) else check_digest(ref)
    # check_digest's pattern ends in `$`, which also matches before a trailing newline.
    if len(digest) != DIGEST_LEN:
        raise MediaError(f"malformed digest {digest!r}: expected 'sha256:' and 64 lowercase hex")
    return digest
