"""Live view: encoded media into the shape browsers and HLS players take live.

:mod:`~mediaflow.live.h264` turns an encoder's Annex B output into MP4 samples and
the ``avcC`` record; :mod:`~mediaflow.live.fmp4` writes the fragmented MP4 itself
(one init segment, then ``moof`` + ``mdat`` fragments with the timing and boundaries
the caller chooses) for HLS fMP4 parts and Media Source Extensions;
:mod:`~mediaflow.live.parts` cuts a camera's encoded frames and a microphone's AAC
frames into ~0.5 s parts on the capture clock, and :mod:`~mediaflow.live.playlist`
lists a window of them as an HLS media playlist. All pure: bytes in, bytes out.
"""

from __future__ import annotations

from mediaflow.live.fmp4 import (
    AudioTrack,
    MuxError,
    Sample,
    TrackRun,
    VideoTrack,
    fragment,
    init_segment,
)
from mediaflow.live.h264 import (
    BitstreamError,
    avc_decoder_config,
    is_keyframe,
    parameter_sets,
    split_annexb,
    sps_dimensions,
    to_avcc,
)

__all__ = [
    "AudioTrack",
    "BitstreamError",
    "MuxError",
    "Sample",
    "TrackRun",
    "VideoTrack",
    "avc_decoder_config",
    "fragment",
    "init_segment",
    "is_keyframe",
    "parameter_sets",
    "split_annexb",
    "sps_dimensions",
    "to_avcc",
]
