"""Did every video packet the server sent reach the recordings? Pure: slices in, verdict out.

The file every camera plays has a list of coded slices (NAL units of slice types, in
decode order: :func:`bench.ipcam.media.reference_slices`). A recording (a camera's
clips, or its segments, each in ``seq`` order) keeps the camera's packets bit for bit,
so its slices must be the file's, as one unbroken run:

- the first piece starts at the file's first slice (a mount plays its file from the
  start when the camera connects; anything before the first piece was lost);
- each piece starts exactly where the one before ended (no slice missing between them,
  none repeated);
- every piece is a run of the file (``foreign``: bytes the server never sent, or an
  artifact that could not be read).

Whatever the server sent after the last piece is not judged here: a stop loses the clip
in progress by design (``mediaflow.nodes.recorder``); the bench bounds that tail with
the segments, which go further than the clips.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Continuity:
    """How a recording's pieces sit in the file (module doc); slice counts."""

    pieces: int
    slices: int  # in all the pieces
    first: int | None  # where the first piece starts in the file (0: its beginning)
    end: int | None  # where the last piece found in the file ends
    gaps: int  # slices of the file missing between pieces
    repeated: int  # slices that a piece repeats from the one before
    foreign: int  # pieces that are not a run of the file (or could not be read)
    holes: list[tuple[int, int]] = field(default_factory=list)  # (where in the file, slices)

    @property
    def missing(self) -> int:
        """Slices lost before the end of the last piece: the head and the gaps."""
        return (self.first or 0) + self.gaps

    @property
    def unbroken(self) -> bool:
        clean = not (self.gaps or self.repeated or self.foreign)
        return self.pieces > 0 and self.first == 0 and clean


def index_of(reference: Sequence[bytes]) -> dict[bytes, list[int]]:
    """Where each slice occurs in ``reference`` (a slice may, in principle, repeat)."""
    index: dict[bytes, list[int]] = {}
    for position, unit in enumerate(reference):
        index.setdefault(unit, []).append(position)
    return index


def locate(
    piece: Sequence[bytes],
    reference: Sequence[bytes],
    index: Mapping[bytes, list[int]],
    after: int | None,
) -> int | None:
    """Where ``piece`` is an unbroken run of ``reference``: the first place at or after
    ``after`` (None: anywhere), else the first anywhere; None if it is not one."""
    if not piece:
        return None
    run = list(piece)
    places = [p for p in index.get(run[0], []) if list(reference[p : p + len(run)]) == run]
    if not places:
        return None
    later = [p for p in places if after is None or p >= after]
    return later[0] if later else places[0]


def continuity(reference: Sequence[bytes], pieces: Sequence[Sequence[bytes] | None]) -> Continuity:
    """How ``pieces`` (None: a piece that could not be read) cover ``reference``."""
    index = index_of(reference)
    first: int | None = None
    end: int | None = None
    gaps = repeated = foreign = slices = 0
    holes: list[tuple[int, int]] = []
    for piece in pieces:
        if piece is None:
            foreign += 1
            continue
        slices += len(piece)
        start = locate(piece, reference, index, end)
        if start is None:
            foreign += 1
            continue
        if first is None:
            first = start
            holes += [(0, start)] if start else []
        elif end is not None and start > end:
            gaps += start - end
            holes.append((end, start - end))
        elif end is not None and start < end:
            repeated += end - start
        end = start + len(piece)
    return Continuity(len(pieces), slices, first, end, gaps, repeated, foreign, holes)
