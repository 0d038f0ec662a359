"""Which encoded media mediaflow keeps as the source made it, and which it converts.

A camera that already sends H.264 or H.265 has done the expensive work: its packets
are copied into segments, clips and the live view (never decoded and encoded again).
AAC sound rides along as it is; any other sound a camera sends (G.711 mu-law and
A-law, as many IP cameras do) is decoded and encoded to AAC once, because MP4 and
browsers do not carry it. Pure data.
"""

from __future__ import annotations

#: FFmpeg's video codec names whose packets are copied, and the name a flow uses.
COPY_VIDEO: dict[str, str] = {"h264": "h264", "hevc": "h265"}
#: Sound an MP4 segment and a browser take as it is.
COPY_AUDIO: frozenset[str] = frozenset({"aac"})


def copies_video(codec: str) -> bool:
    """Whether a source whose video is ``codec`` (FFmpeg's name) can be copied."""
    return codec in COPY_VIDEO


def audio_plan(codec: str) -> str:
    """``"copy"`` for sound carried as it is, ``"aac"`` for sound encoded to AAC once."""
    return "copy" if codec in COPY_AUDIO else "aac"
