"""Checking connector options: sizes, rates, codecs, and paths relative to the flow file.

Options arrive from TOML as plain values; every check here raises ``ValueError`` with
the option's name and what would be accepted, so a bad flow fails when its node is
built, before any device is touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

Codec = Literal["h264", "vp8", "vp9"]
CODECS: tuple[Codec, ...] = get_args(Codec)


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
    """``h264`` (fragmented MP4), ``vp8`` or ``vp9`` (WebM)."""
    for known in CODECS:
        if codec == known:
            return known
    raise ValueError(f"codec must be one of {', '.join(CODECS)}, got {codec!r}")


def check_live_audio(node: str | None, codec: str) -> str | None:
    """A node id for ``live_audio`` (the flow checks that it has sound); only with
    H.264, the one codec live view plays."""
    if node is None:
        return None
    if not isinstance(node, str) or not node:
        raise ValueError(f"live_audio must be the id of a node with sound, got {node!r}")
    if codec != "h264":
        raise ValueError(f"live_audio needs codec = 'h264' (live view plays H.264), not {codec!r}")
    return node


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
