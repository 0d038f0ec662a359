"""The HLS media playlist of a live stream's window (RFC 8216, fMP4, with the
low-latency extension of its second edition: ``EXT-X-PART``).

A group of pictures is a *media segment*: its parts back to back, starting with a
keyframe, so a player that knows only segments (ffmpeg, VLC) starts where it can
decode. The segment in progress and the parts of every listed segment are
``EXT-X-PART`` lines, each keyframe part marked ``INDEPENDENT=YES``: a low-latency
player (hls.js, Safari) and the wall follow the stream part by part, a part's length
behind the camera. Each segment carries its capture time as
``EXT-X-PROGRAM-DATE-TIME``, so a player (and the latency benchmark) can tell how
far behind it plays. Pure: the server fills in the URIs and holds blocking reloads.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from mediaflow.live.parts import LivePart

VERSION = 9  # fMP4 with EXT-X-MAP; EXT-X-PART and blocking reloads (RFC 8216bis)


def segments(parts: Sequence[LivePart]) -> list[list[LivePart]]:
    """``parts`` grouped by segment, in order."""
    return [list(group) for _, group in itertools.groupby(parts, key=lambda p: p.segment)]


def window(parts: Sequence[LivePart], min_parts: int) -> list[LivePart]:
    """The parts from the start of the newest *finished* segment that leaves at least
    ``min_parts`` listed (from the oldest finished one if none does, from the one in
    progress if none is finished); none if no part starts a segment: a player could not
    start anywhere. However long a camera's groups of pictures are, a player that knows
    only segments finds a whole one, and a player of parts a few to buffer."""
    starts = [index for index, part in enumerate(parts) if part.independent]
    if not starts:
        return []
    finished = starts[:-1] or starts
    fitting = [index for index in finished if len(parts) - index >= min_parts]
    return list(parts[fitting[-1] if fitting else finished[0] :])


def program_date_time(epoch_s: float) -> str:
    """ISO 8601 with milliseconds and a zone, as ``EXT-X-PROGRAM-DATE-TIME`` wants."""
    moment = datetime.fromtimestamp(epoch_s, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def part_target(longest_s: float) -> float:
    """The ``PART-TARGET`` for parts up to ``longest_s`` long: rounded up to the
    millisecond (no part may be longer than it)."""
    return math.ceil(longest_s * 1000 - 1e-6) / 1000


def media_playlist(
    parts: Sequence[LivePart],
    *,
    init_uri: str,
    part_uri: Callable[[LivePart], str],
    segment_uri: Callable[[int], str],
    part_target_s: float,
    target_s: float,
    ended: bool = False,
) -> str:
    """The playlist text for ``parts`` (a :func:`window`). ``part_target_s``: the
    longest a part may be (:func:`part_target`); ``target_s``: the longest a segment
    may be (the camera's keyframe interval). The last segment is finished only once
    the stream ``ended``; until then it is listed by its parts alone."""
    groups = segments(parts)
    done = groups if ended else groups[:-1]
    longest = max((sum(p.duration_s for p in group) for group in done), default=0.0)
    target = max(1, math.ceil(target_s - 1e-9), round(longest), math.ceil(part_target_s))
    lines = [
        "#EXTM3U",
        f"#EXT-X-VERSION:{VERSION}",
        f"#EXT-X-TARGETDURATION:{target}",
    ]
    if not ended:
        hold_back = 3 * part_target_s
        lines.append(f"#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK={hold_back:.3f}")
    lines += [
        f"#EXT-X-PART-INF:PART-TARGET={part_target_s:.3f}",
        f"#EXT-X-MEDIA-SEQUENCE:{parts[0].segment if parts else 0}",
        f'#EXT-X-MAP:URI="{init_uri}"',
    ]
    for number, group in enumerate(groups):
        lines.append(f"#EXT-X-PROGRAM-DATE-TIME:{program_date_time(group[0].captured_at)}")
        for part in group:
            independent = ",INDEPENDENT=YES" if part.independent else ""
            uri = part_uri(part)
            lines.append(f'#EXT-X-PART:DURATION={part.duration_s:.5f},URI="{uri}"{independent}')
        if number < len(done):
            lines.append(f"#EXTINF:{sum(p.duration_s for p in group):.5f},")
            lines.append(segment_uri(group[0].segment))
    if ended:
        lines.append("#EXT-X-ENDLIST")
    return "\n".join(lines) + "\n"
