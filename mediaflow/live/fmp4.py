"""Fragmented MP4 (ISO/IEC 14496-12, CMAF-shaped) for live view: one H.264 track, one AAC.

:func:`init_segment` writes ``ftyp`` + ``moov`` with empty sample tables and an
``mvex``: every sample lives in fragments. :func:`fragment` writes one ``moof`` +
``mdat``; each track's run says where it starts on the track's timeline (``tfdt``),
so fragments made one at a time, appended after one init segment, play as one
stream, and a player can join at any fragment that starts with a keyframe (an HLS
part or a Media Source Extensions append).

Offsets are relative to the ``moof`` (``default-base-is-moof``, §8.8.7.1), so a
fragment does not depend on where it lands in a file. Track ids are fixed: video 1,
audio 2. Pure: no I/O, nothing blocks; input a box cannot carry raises
:class:`MuxError`. Section numbers are ISO/IEC 14496-12:2022's unless named.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from mediaflow.live.h264 import avc_decoder_config, parameter_sets, sps_dimensions

VIDEO_TRACK_ID = 1
AUDIO_TRACK_ID = 2
MOVIE_TIMESCALE = 1000  # mvhd's; durations there are 0 (live), so any value would do

# sample_flags (§8.8.3.1): sample_depends_on in bits 24-25, sample_is_non_sync_sample bit 16.
KEYFRAME_FLAGS = 0x02000000  # depends on no other sample
NON_KEYFRAME_FLAGS = 0x01010000  # depends on others, not a sync sample

_UNITY_MATRIX = struct.pack(">9i", 0x00010000, 0, 0, 0, 0x00010000, 0, 0, 0, 0x40000000)
_LANGUAGE_UND = (21 << 10) | (14 << 5) | 4  # 'und' as three 5-bit letters minus 0x60 (§8.4.2)
_URL_SELF_CONTAINED = 0x000001
_TFHD_DEFAULT_BASE_IS_MOOF = 0x020000
_TRUN_DATA_OFFSET = 0x000001
_TRUN_SAMPLE_DURATION = 0x000100
_TRUN_SAMPLE_SIZE = 0x000200
_TRUN_SAMPLE_FLAGS = 0x000400
_TRUN_COMPOSITION_OFFSETS = 0x000800
_U32_MAX = 0xFFFFFFFF


class MuxError(ValueError):
    """Input that the boxes cannot carry (an empty run, a value out of range)."""


@dataclass(frozen=True)
class VideoTrack:
    """An H.264 track: parameter sets (NAL units, no start codes) and the picture size."""

    sps: list[bytes]
    pps: list[bytes]
    width: int
    height: int
    timescale: int = 90000

    @classmethod
    def from_annexb(cls, data: bytes, timescale: int = 90000) -> VideoTrack:
        """The track whose parameter sets are in Annex B ``data`` (extradata or a keyframe).

        Raises :class:`~mediaflow.live.h264.BitstreamError` if ``data`` has no SPS.
        """
        sps, pps = parameter_sets(data)
        avc_decoder_config(sps, pps)  # raises now, not later in init_segment
        width, height = sps_dimensions(sps[0])
        return cls(sps, pps, width, height, timescale)

    @property
    def codec(self) -> str:
        """The RFC 6381 codecs string (``avc1.PPCCLL``) for HLS and ``isTypeSupported``."""
        return "avc1." + self.sps[0][1:4].hex() if self.sps else "avc1"


@dataclass(frozen=True)
class AudioTrack:
    """An AAC track; ``asc`` is the AudioSpecificConfig (an AAC encoder's extradata).

    Its timescale is ``sample_rate``: one AAC-LC frame lasts 1024 ticks.
    """

    sample_rate: int
    channels: int
    asc: bytes

    @property
    def codec(self) -> str:
        """The RFC 6381 codecs string: ``mp4a.40.`` and the audio object type (2 for LC).

        Read from the ASC's first 5 bits, so object types from 31 up (escaped) are not told.
        """
        return f"mp4a.40.{self.asc[0] >> 3}" if self.asc else "mp4a.40"


@dataclass(frozen=True, slots=True)
class Sample:
    """One access unit: AVCC bytes for video, a raw AAC frame for audio.

    ``duration`` and ``composition_offset`` are in the track's timescale.
    """

    data: bytes
    duration: int
    keyframe: bool
    composition_offset: int = 0


@dataclass(frozen=True)
class TrackRun:
    """Consecutive samples of one track, the first decoded at ``base_decode_time``."""

    track_id: int
    base_decode_time: int
    samples: list[Sample]


def box(kind: bytes, *payloads: bytes) -> bytes:
    """A box: 32-bit size, 4-character type, payload (64-bit ``largesize`` if needed)."""
    size = 8 + sum(len(payload) for payload in payloads)
    if size > _U32_MAX:  # size 1 announces a largesize after the type (§4.2)
        return struct.pack(">I4sQ", 1, kind, size + 8) + b"".join(payloads)
    return struct.pack(">I4s", size, kind) + b"".join(payloads)


def full_box(kind: bytes, version: int, flags: int, *payloads: bytes) -> bytes:
    """A FullBox: a box whose payload starts with an 8-bit version and 24-bit flags."""
    return box(kind, struct.pack(">I", (version << 24) | flags), *payloads)


# -- the init segment ----------------------------------------------------------------------


def init_segment(video: VideoTrack, audio: AudioTrack | None) -> bytes:
    """``ftyp`` + ``moov`` for ``video`` (track 1) and ``audio`` (track 2), if any."""
    tracks = [_video_trak(video)] + ([_audio_trak(audio)] if audio else [])
    extends = [_trex(VIDEO_TRACK_ID)] + ([_trex(AUDIO_TRACK_ID)] if audio else [])
    next_track_id = (AUDIO_TRACK_ID if audio else VIDEO_TRACK_ID) + 1
    return _ftyp() + box(b"moov", _mvhd(next_track_id), *tracks, box(b"mvex", *extends))


def _ftyp() -> bytes:
    # iso6: tfdt and default-base-is-moof are understood; cmfc: CMAF's structural brand.
    compatible = (b"iso6", b"cmfc", b"isom", b"mp41", b"avc1")
    return box(b"ftyp", b"iso6", struct.pack(">I", 0), *compatible)


def _mvhd(next_track_id: int) -> bytes:
    return full_box(
        b"mvhd",
        0,
        0,
        struct.pack(">IIII", 0, 0, MOVIE_TIMESCALE, 0),  # created, modified, timescale, duration
        struct.pack(">IH", 0x00010000, 0x0100),  # rate 1.0, volume 1.0
        bytes(10),  # reserved
        _UNITY_MATRIX,
        bytes(24),  # pre_defined
        struct.pack(">I", next_track_id),
    )


def _tkhd(track_id: int, volume: int, width: int, height: int) -> bytes:
    enabled_in_movie = 0x000003
    return full_box(
        b"tkhd",
        0,
        enabled_in_movie,
        struct.pack(">IIIII", 0, 0, track_id, 0, 0),  # created, modified, id, reserved, duration
        bytes(8),  # reserved
        struct.pack(">hhhH", 0, 0, volume, 0),  # layer, alternate_group, volume, reserved
        _UNITY_MATRIX,
        struct.pack(">II", width << 16, height << 16),  # 16.16 fixed point
    )


def _mdia(timescale: int, handler: bytes, name: bytes, media_header: bytes, entry: bytes) -> bytes:
    mdhd = full_box(b"mdhd", 0, 0, struct.pack(">IIIIHH", 0, 0, timescale, 0, _LANGUAGE_UND, 0))
    hdlr = full_box(b"hdlr", 0, 0, struct.pack(">I4s", 0, handler), bytes(12), name + b"\x00")
    # One data reference, flagged self-contained: the samples are in this file.
    url = full_box(b"url ", 0, _URL_SELF_CONTAINED)
    dinf = box(b"dinf", full_box(b"dref", 0, 0, struct.pack(">I", 1), url))
    minf = box(b"minf", media_header, dinf, _stbl(entry))
    return box(b"mdia", mdhd, hdlr, minf)


def _stbl(entry: bytes) -> bytes:
    # The sample tables are empty: the samples are described by each fragment's trun.
    return box(
        b"stbl",
        full_box(b"stsd", 0, 0, struct.pack(">I", 1), entry),
        full_box(b"stts", 0, 0, struct.pack(">I", 0)),
        full_box(b"stsc", 0, 0, struct.pack(">I", 0)),
        full_box(b"stsz", 0, 0, struct.pack(">II", 0, 0)),
        full_box(b"stco", 0, 0, struct.pack(">I", 0)),
    )


def _video_trak(video: VideoTrack) -> bytes:
    avc1 = box(
        b"avc1",
        bytes(6),  # reserved
        struct.pack(">H", 1),  # data_reference_index: the dref's one entry
        bytes(16),  # pre_defined, reserved
        struct.pack(">HH", video.width, video.height),
        struct.pack(">II", 0x00480000, 0x00480000),  # 72 dpi
        struct.pack(">IH", 0, 1),  # reserved, frame_count
        bytes(32),  # compressorname (a Pascal string; empty)
        struct.pack(">Hh", 0x0018, -1),  # depth: colour, no alpha; pre_defined
        box(b"avcC", avc_decoder_config(video.sps, video.pps)),
    )
    vmhd = full_box(b"vmhd", 0, 1, bytes(8))  # flags 1 is required; graphicsmode copy
    mdia = _mdia(video.timescale, b"vide", b"VideoHandler", vmhd, avc1)
    return box(b"trak", _tkhd(VIDEO_TRACK_ID, 0, video.width, video.height), mdia)


def _audio_trak(audio: AudioTrack) -> bytes:
    # samplerate is 16.16 fixed point; a rate above 65535 Hz cannot be said: 0, and the
    # decoder takes the rate from the AudioSpecificConfig, as it does anyway.
    rate = audio.sample_rate << 16 if audio.sample_rate <= 0xFFFF else 0
    mp4a = box(
        b"mp4a",
        bytes(6),  # reserved
        struct.pack(">H", 1),  # data_reference_index
        bytes(8),  # reserved
        struct.pack(">HHHHI", audio.channels, 16, 0, 0, rate),  # 16-bit, pre_defined, reserved
        _esds(audio.asc),
    )
    smhd = full_box(b"smhd", 0, 0, bytes(4))  # balance centre, reserved
    mdia = _mdia(audio.sample_rate, b"soun", b"SoundHandler", smhd, mp4a)
    return box(b"trak", _tkhd(AUDIO_TRACK_ID, 0x0100, 0, 0), mdia)


def _esds(asc: bytes) -> bytes:
    # ISO/IEC 14496-1 §7.2.6: ES_Descriptor > DecoderConfigDescriptor > DecoderSpecificInfo,
    # then SLConfigDescriptor with predefined 2 (MP4 files). Object type 0x40: 14496-3
    # audio; stream type 5 (audio) << 2 | upstream 0 | reserved 1. Buffer size and bitrates
    # are unknown live: 0, which players ignore.
    config = _descriptor(4, struct.pack(">BB3sII", 0x40, 0x15, bytes(3), 0, 0), _descriptor(5, asc))
    es = _descriptor(3, struct.pack(">HB", AUDIO_TRACK_ID, 0), config, _descriptor(6, b"\x02"))
    return full_box(b"esds", 0, 0, es)


def _descriptor(tag: int, *payloads: bytes) -> bytes:
    body = b"".join(payloads)
    # The size is 7 bits a byte, high bit set on all but the last (14496-1 §8.3.3).
    size = len(body)
    encoded = [size & 0x7F]
    while size > 0x7F:
        size >>= 7
        encoded.insert(0, 0x80 | (size & 0x7F))
    return bytes([tag, *encoded]) + body


def _trex(track_id: int) -> bytes:
    # Defaults stay 0: every trun states duration, size and flags for each sample.
    return full_box(b"trex", 0, 0, struct.pack(">IIIII", track_id, 1, 0, 0, 0))


# -- fragments ------------------------------------------------------------------------------


def fragment(sequence: int, runs: list[TrackRun]) -> bytes:
    """One ``moof`` (``mfhd`` numbered ``sequence``, a ``traf`` per run) and one ``mdat``.

    The mdat holds the runs' samples in the order of ``runs``; each trun's data_offset
    points at its run's first byte, counted from the start of the moof. Raises
    :class:`MuxError` for no runs, a run without samples, a track twice, or a number a
    field cannot hold.
    """
    _check_runs(sequence, runs)
    # The moof's size does not depend on the offset values, so a first pass with zeros
    # measures it and the second writes the real ones.
    moof_size = len(_moof(sequence, runs, [0] * len(runs)))
    payload = [sample.data for run in runs for sample in run.samples]
    mdat = box(b"mdat", *payload)
    mdat_header = len(mdat) - sum(len(data) for data in payload)
    offsets, position = [], moof_size + mdat_header
    for run in runs:
        offsets.append(position)
        position += sum(len(sample.data) for sample in run.samples)
    return _moof(sequence, runs, offsets) + mdat


def _check_runs(sequence: int, runs: list[TrackRun]) -> None:
    if not runs:
        raise MuxError("a fragment needs at least one track run")
    if not 0 <= sequence <= _U32_MAX:
        raise MuxError(f"sequence number {sequence} does not fit 32 bits")
    ids = [run.track_id for run in runs]
    if len(set(ids)) != len(ids):
        raise MuxError(f"a track may have one run per fragment, got track ids {ids}")
    for run in runs:
        if not run.samples:
            raise MuxError(f"the run of track {run.track_id} has no samples")
        if not 0 <= run.base_decode_time < 1 << 64:
            raise MuxError(f"base_decode_time {run.base_decode_time} does not fit 64 bits")
        if any(not 0 <= sample.duration <= _U32_MAX for sample in run.samples):
            raise MuxError(f"a sample duration of track {run.track_id} does not fit 32 bits")
        if any(not -(1 << 31) <= s.composition_offset < 1 << 31 for s in run.samples):
            raise MuxError(f"a composition offset of track {run.track_id} does not fit 32 bits")


def _moof(sequence: int, runs: list[TrackRun], offsets: list[int]) -> bytes:
    mfhd = full_box(b"mfhd", 0, 0, struct.pack(">I", sequence))
    trafs = [_traf(run, offset) for run, offset in zip(runs, offsets, strict=True)]
    return box(b"moof", mfhd, *trafs)


def _traf(run: TrackRun, data_offset: int) -> bytes:
    tfhd = full_box(b"tfhd", 0, _TFHD_DEFAULT_BASE_IS_MOOF, struct.pack(">I", run.track_id))
    tfdt = full_box(b"tfdt", 1, 0, struct.pack(">Q", run.base_decode_time))
    return box(b"traf", tfhd, tfdt, _trun(run.samples, data_offset))


def _trun(samples: list[Sample], data_offset: int) -> bytes:
    flags = _TRUN_DATA_OFFSET | _TRUN_SAMPLE_DURATION | _TRUN_SAMPLE_SIZE | _TRUN_SAMPLE_FLAGS
    offsets = [sample.composition_offset for sample in samples]
    with_offsets = any(offsets)
    if with_offsets:
        flags |= _TRUN_COMPOSITION_OFFSETS
    # Version 1 makes the offsets signed (§8.8.8.3); version 0 suffices when none is negative.
    version = 1 if min(offsets) < 0 else 0
    entry = struct.Struct(">IIIi" if with_offsets else ">III")
    rows = [
        entry.pack(
            sample.duration,
            len(sample.data),
            KEYFRAME_FLAGS if sample.keyframe else NON_KEYFRAME_FLAGS,
            *((sample.composition_offset,) if with_offsets else ()),
        )
        for sample in samples
    ]
    return full_box(b"trun", version, flags, struct.pack(">Ii", len(samples), data_offset), *rows)
