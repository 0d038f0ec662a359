"""Checking connector options: sizes, rates, codecs, and paths relative to the flow file.

Options arrive from TOML as plain values; every check here raises ``ValueError`` with
the option's name and what would be accepted, so a bad flow fails when its node is
built, before any device is touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

EncodeCodec = Literal["h264", "vp8", "vp9"]
#: What mediaflow encodes raw pictures to.
CODECS: tuple[EncodeCodec, ...] = get_args(EncodeCodec)
Codec = Literal["auto", "h264", "h265", "vp8", "vp9"]
#: What a flow may ask for: ``auto`` keeps a source's own H.264/H.265, else encodes H.264.
OPTION_CODECS: tuple[Codec, ...] = get_args(Codec)
#: FFmpeg's names of the source codecs each ``codec`` copies instead of encoding.
COPIED_BY: dict[Codec, frozenset[str]] = {
    "auto": frozenset({"h264", "hevc"}),
    "h264": frozenset({"h264"}),
    "h265": frozenset({"hevc"}),
    "vp8": frozenset(),
    "vp9": frozenset(),
}


def parse_size(value: str | tuple[int, int] | list[int] | None) -> tuple[int, int] | None:
    """``"640x480"`` (or ``[640, 480]``) as ``(640, 480)``; None stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        width, sep, height = value.lower().partition("x")
        if not sep or not width.strip().isdigit() or not height.strip().isdigit():
            raise ValueError(f"size must look like '640x480', got {value!r}")
        size = (int(width), int(height))
    elif isinstance(value, tuple | list) and len(value) == 2:
        size = (int(value[0]), int(value[1]))
    else:
        raise ValueError(f"size must look like '640x480', got {value!r}")
    if size[0] <= 0 or size[1] <= 0:
        raise ValueError(f"size must be positive, got {value!r}")
    return size


def positive(name: str, value: float) -> float:
    """``value`` if it is > 0; ``ValueError`` naming the option otherwise."""
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return value


def optional_positive(name: str, value: float | None) -> float | None:
    """``value`` if it is None or > 0; ``ValueError`` naming the option otherwise."""
    return None if value is None else positive(name, value)


def check_quality(quality: int) -> int:
    """A JPEG quality, 1 (smallest) to 100 (best)."""
    if not 1 <= quality <= 100:
        raise ValueError(f"quality must be within 1-100, got {quality!r}")
    return quality


def check_codec(codec: str) -> Codec:
    """``auto``, ``h264``, ``h265`` (fragmented MP4), ``vp8`` or ``vp9`` (WebM)."""
    for known in OPTION_CODECS:
        if codec == known:
            return known
    raise ValueError(f"codec must be one of {', '.join(OPTION_CODECS)}, got {codec!r}")


def encode_codec(codec: Codec) -> EncodeCodec:
    """What raw pictures are encoded to for ``codec``; ``ValueError`` for ``h265``,
    which is only ever copied from a source that sends it."""
    if codec == "auto":
        return "h264"
    if codec == "h265":
        raise ValueError(
            "codec = 'h265' keeps an H.265 source's own packets; mediaflow does not encode "
            "H.265 (use 'auto' or 'h264' for a source that sends anything else)"
        )
    return codec


def check_copy(copy: bool | None, codec: Codec, resize: bool) -> bool | None:
    """``copy`` if it can hold with ``codec`` and a resize (``ValueError`` naming why not)."""
    if copy and resize:
        raise ValueError("copy = true keeps the source's pictures as they are: it cannot resize")
    if copy and not COPIED_BY[codec]:
        raise ValueError(f"copy = true keeps H.264 or H.265 as it is; codec = {codec!r} encodes")
    if copy is False and codec == "h265":
        raise ValueError("copy = false encodes, and mediaflow does not encode H.265")
    return copy


def check_live_audio(node: str | None, codec: str) -> str | None:
    """A node id for ``live_audio`` (the flow checks that it has sound); only with
    H.264 (or ``auto``), the one codec live view plays."""
    if node is None:
        return None
    if not isinstance(node, str) or not node:
        raise ValueError(f"live_audio must be the id of a node with sound, got {node!r}")
    if codec not in ("h264", "auto"):
        raise ValueError(f"live_audio needs codec = 'h264' (live view plays H.264), not {codec!r}")
    return node


def check_transport(transport: str | None) -> str | None:
    """RTSP's transport: ``tcp`` (the default, None) or ``udp``."""
    if transport is not None and transport not in ("tcp", "udp"):
        raise ValueError(f"transport must be 'tcp' or 'udp', got {transport!r}")
    return transport


def resolve_spec(spec: str, flow_dir: Path) -> str:
    """``spec`` with a relative ``file:`` path (or a bare relative path that exists there)
    made absolute against ``flow_dir``; any other spec is returned unchanged. Pure
    apart from one existence check."""
    if spec.startswith("file:"):
        path = Path(spec[len("file:") :])
        return spec if path.is_absolute() else f"file:{flow_dir / path}"
    candidate = flow_dir / spec
    if "/" in spec and not Path(spec).is_absolute() and candidate.is_file():
        return f"file:{candidate}"
    return spec
