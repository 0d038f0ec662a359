"""Checking copied video: the coded pictures of one file found, bit for bit, in another."""

from __future__ import annotations

import io
from fractions import Fraction
from pathlib import Path
from typing import Any

import av

from mediaflow.live.h264 import is_annexb, split_annexb

H264_SLICES = frozenset({1, 5})  # coded slices of non-IDR and IDR pictures (H.264 Table 7-1)
HEVC_SLICES = frozenset(range(32))  # VCL NAL unit types 0-31 (H.265 Table 7-1)


def nal_units(sample: bytes) -> list[bytes]:
    """The NAL units of one access unit, Annex B or behind 4-byte lengths (MP4)."""
    if is_annexb(sample):
        return split_annexb(sample)
    units, position = [], 0
    while position + 4 <= len(sample):
        size = int.from_bytes(sample[position : position + 4], "big")
        units.append(sample[position + 4 : position + 4 + size])
        position += 4 + size
    return units


def is_slice(unit: bytes, codec: str) -> bool:
    """Whether NAL unit ``unit`` of an ``h264`` or ``hevc`` stream holds a coded slice."""
    if not unit:
        return False
    if codec == "hevc":
        return (unit[0] >> 1) & 0x3F in HEVC_SLICES
    return unit[0] & 0x1F in H264_SLICES


def h264_slices(media: Path | bytes) -> list[bytes]:
    """Every slice NAL unit of ``media``'s H.264 (or H.265) video, in decode order.
    Parameter sets, delimiters and SEI are left out: a copy may repeat or drop those
    in-band."""
    with av.open(str(media) if isinstance(media, Path) else io.BytesIO(media)) as container:
        stream = container.streams.video[0]
        codec = stream.codec_context.name
        return [
            unit
            for packet in container.demux(stream)
            if packet.size
            for unit in nal_units(bytes(packet))
            if is_slice(unit, codec)
        ]


def find_run(part: list[bytes], whole: list[bytes]) -> int | None:
    """Where ``part`` appears in ``whole`` as one unbroken run, or None."""
    if not part:
        return 0
    for start in (i for i, unit in enumerate(whole) if unit == part[0]):
        if whole[start : start + len(part)] == part:
            return start
    return None


def stream_facts(media: bytes | Path) -> dict[str, Any]:
    """Codec, tag, size, frame count and span of each stream, and whether every
    packet decodes (PyAV); keyed ``video`` and ``audio``."""
    facts: dict[str, Any] = {}
    with av.open(str(media) if isinstance(media, Path) else io.BytesIO(media)) as container:
        streams = [s for s in container.streams if s.type in ("video", "audio")]
        packets: dict[int, list[av.Packet[Any]]] = {s.index: [] for s in streams}
        for packet in container.demux(streams):
            if packet.size:
                packets[packet.stream.index].append(packet)
        for stream in streams:
            own = packets[stream.index]
            base = stream.time_base or Fraction(1)
            times = [p.pts * base for p in own if p.pts is not None]
            context = stream.codec_context
            facts[stream.type] = {
                "codec": context.name,
                "tag": context.codec_tag,
                "rate": getattr(context, "sample_rate", None),
                "width": getattr(context, "width", None),
                "height": getattr(context, "height", None),
                "packets": len(own),
                "decoded": sum(len(p.decode()) for p in own),
                "first_keyframe": bool(own) and own[0].is_keyframe,
                "start": float(min(times)) if times else None,
                "end": float(max(times)) if times else None,
            }
    return facts
