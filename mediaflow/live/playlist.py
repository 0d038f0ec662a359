"""The HLS media playlist of a live stream's window of parts (RFC 8216, fMP4, version 7).

Each :class:`~mediaflow.live.parts.LivePart` is listed as one media segment, after
the init segment's ``EXT-X-MAP``, with its capture time as
``EXT-X-PROGRAM-DATE-TIME`` so a player (and the latency benchmark) can tell how far
behind the camera it plays. A player starts near the end of the list and must be
able to decode from where it starts, so :func:`window` begins at a part that starts
with a keyframe; parts that start with one are marked for the wall's player. Pure:
the server fills in the URIs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from mediaflow.live.parts import LivePart

VERSION = 7  # fMP4 segments with EXT-X-MAP in a media playlist
# Before a part that starts with a keyframe: where the wall's player may start. Not a
# tag (tags begin "#EXT"), so per RFC 8216 every other player reads it as a comment.
INDEPENDENT = "#X-MEDIAFLOW-INDEPENDENT"


def window(parts: Sequence[LivePart], min_parts: int) -> list[LivePart]:
    """The parts from the newest independent one that leaves at least ``min_parts``
    listed (from the oldest independent one if none does); none if no part is
    independent: a player could not start anywhere. However long a camera's groups
    of pictures are, a player finds a place to start and a few parts to buffer."""
    starts = [index for index, part in enumerate(parts) if part.independent]
    if not starts:
        return []
    fitting = [index for index in starts if len(parts) - index >= min_parts]
    return list(parts[fitting[-1] if fitting else starts[0] :])


def program_date_time(epoch_s: float) -> str:
    """ISO 8601 with milliseconds and a zone, as ``EXT-X-PROGRAM-DATE-TIME`` wants."""
    moment = datetime.fromtimestamp(epoch_s, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def media_playlist(
    parts: Sequence[LivePart],
    *,
    init_uri: str,
    part_uri: Callable[[LivePart], str],
    part_s: float,
    ended: bool = False,
) -> str:
    """The playlist text for ``parts`` (a :func:`window`). ``part_s`` is the parts'
    nominal length: the target duration must hold the longest part, rounded up."""
    longest = max((part.duration_s for part in parts), default=part_s)
    lines = [
        "#EXTM3U",
        f"#EXT-X-VERSION:{VERSION}",
        f"#EXT-X-TARGETDURATION:{max(1, math.ceil(max(longest, part_s) - 1e-9))}",
        f"#EXT-X-MEDIA-SEQUENCE:{parts[0].seq if parts else 0}",
        f'#EXT-X-MAP:URI="{init_uri}"',
    ]
    previous: LivePart | None = None
    for part in parts:
        if previous is not None and part.seq != previous.seq + 1:
            lines.append("#EXT-X-DISCONTINUITY")
        if part.independent:
            lines.append(INDEPENDENT)
        lines.append(f"#EXT-X-PROGRAM-DATE-TIME:{program_date_time(part.captured_at)}")
        lines.append(f"#EXTINF:{part.duration_s:.3f},")
        lines.append(part_uri(part))
        previous = part
    if ended:
        lines.append("#EXT-X-ENDLIST")
    return "\n".join(lines) + "\n"
