"""H.264 byte-stream helpers for the fMP4 writer: Annex B in, AVCC and ``avcC`` out.

Encoders hand out Annex B (NAL units behind ``00 00 01`` / ``00 00 00 01`` start
codes); an MP4 sample holds the same NAL units behind 4-byte big-endian lengths, and
the parameter sets (SPS, PPS) move out of the samples into the track's
AVCDecoderConfigurationRecord (ISO/IEC 14496-15 §5.3.3.1). :func:`sps_dimensions`
reads the picture size from an SPS (ITU-T H.264 §7.3.2.1.1) for ``tkhd`` and ``avc1``.

Pure: no I/O, nothing blocks. Malformed input raises :class:`BitstreamError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NAL_IDR = 5
NAL_SPS = 7
NAL_PPS = 8
NAL_AUD = 9
_NOT_IN_SAMPLES = frozenset({NAL_SPS, NAL_PPS, NAL_AUD})  # ISO/IEC 14496-15 §5.3.2

# Profiles whose SPS carries chroma_format_idc, bit depths and scaling lists (H.264 §7.3.2.1.1).
_HIGH_PROFILES = frozenset({100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135})
# Profiles whose avcC ends with chroma format and bit depths (ISO/IEC 14496-15 §5.3.3.1.2
# names 100, 110, 122 and 144; 144 was withdrawn for 244, High 4:4:4 Predictive, which
# FFmpeg's muxer extends as well).
_AVCC_EXTENDED_PROFILES = frozenset({100, 110, 122, 144, 244})
_START_CODE = b"\x00\x00\x01"
_EMULATION_PREVENTION = re.compile(b"\x00\x00\x03")


class BitstreamError(ValueError):
    """The bytes are not the H.264 syntax the function expects."""


def nal_type(nal: bytes) -> int:
    """The nal_unit_type of one NAL unit (the low 5 bits of its header byte)."""
    return nal[0] & 0x1F


def split_annexb(data: bytes) -> list[bytes]:
    """The NAL units of Annex B ``data``, without start codes, in order.

    Both start code lengths are accepted: the zero byte of a 4-byte one is the
    trailing_zero_8bits of the NAL before it, and a NAL never ends in a zero byte
    (its last byte holds the stop bit, §7.4.1), so trailing zeros are stripped.
    Raises :class:`BitstreamError` if non-zero bytes come before the first start code.
    """
    first = data.find(_START_CODE)
    leading = data if first < 0 else data[:first]
    if leading.strip(b"\x00"):
        raise BitstreamError("not an Annex B byte stream: no start code before the data")
    nals: list[bytes] = []
    start = first
    while start >= 0:
        end = data.find(_START_CODE, start + 3)
        nal = data[start + 3 : end if end >= 0 else len(data)].rstrip(b"\x00")
        if nal:
            nals.append(nal)
        start = end
    return nals


def to_avcc(data: bytes) -> bytes:
    """An Annex B access unit as an MP4 sample: each NAL behind a 4-byte length.

    SPS, PPS and access unit delimiters are left out: the parameter sets live in the
    ``avcC`` of the init segment, and 14496-15 keeps delimiters out of samples.
    """
    return b"".join(
        len(nal).to_bytes(4, "big") + nal
        for nal in split_annexb(data)
        if nal_type(nal) not in _NOT_IN_SAMPLES
    )


def parameter_sets(data: bytes) -> tuple[list[bytes], list[bytes]]:
    """The distinct SPS and PPS NAL units in Annex B ``data``, in order of appearance.

    ``data`` is an encoder's extradata (with the global-header flag) or a keyframe;
    a set repeated before every keyframe is listed once.
    """
    sps: list[bytes] = []
    pps: list[bytes] = []
    for nal in split_annexb(data):
        found = {NAL_SPS: sps, NAL_PPS: pps}.get(nal_type(nal))
        if found is not None and nal not in found:
            found.append(nal)
    return sps, pps


def is_annexb(data: bytes) -> bool:
    """Whether ``data`` starts with a start code (Annex B), not a NAL length (AVCC)."""
    return data.startswith(_START_CODE) or data.startswith(b"\x00" + _START_CODE)


def avcc_sample(sample: bytes, length_size: int = 4) -> bytes:
    """An MP4 sample (NAL units behind ``length_size``-byte lengths) as a live part's
    sample: 4-byte lengths, without parameter sets and delimiters (see :func:`to_avcc`).

    Raises :class:`BitstreamError` when a length runs past the end of ``sample``.
    """
    if length_size == 4 and not _has_excluded(sample):
        return sample  # the common case: nothing to change
    out = bytearray()
    for nal in _length_prefixed_nals(sample, length_size):
        if nal_type(nal) not in _NOT_IN_SAMPLES:
            out += len(nal).to_bytes(4, "big") + nal
    return bytes(out)


def _has_excluded(sample: bytes) -> bool:
    return any(nal_type(nal) in _NOT_IN_SAMPLES for nal in _length_prefixed_nals(sample, 4))


def _length_prefixed_nals(sample: bytes, length_size: int) -> list[bytes]:
    nals = []
    position = 0
    while position < len(sample):
        end = position + length_size
        size = int.from_bytes(sample[position:end], "big")
        if end + size > len(sample) or size == 0:
            raise BitstreamError("a NAL length runs past the end of the sample")
        nals.append(sample[end : end + size])
        position = end + size
    return nals


def avcc_config_to_annexb(record: bytes) -> tuple[bytes, int]:
    """The SPS and PPS of an ``avcC`` record as Annex B, and its NAL length size.

    Raises :class:`BitstreamError` for a record that ends early.
    """
    if len(record) < 7 or record[0] != 1:
        raise BitstreamError("not an AVCDecoderConfigurationRecord")
    length_size = (record[4] & 0x03) + 1
    out = bytearray()
    position = 5
    for count_mask in (0x1F, 0xFF):
        if position >= len(record):
            raise BitstreamError("the avcC record ends early")
        count = record[position] & count_mask
        position += 1
        for _ in range(count):
            size = int.from_bytes(record[position : position + 2], "big")
            nal = record[position + 2 : position + 2 + size]
            if len(nal) != size:
                raise BitstreamError("the avcC record ends early")
            out += b"\x00\x00\x00\x01" + nal
            position += 2 + size
    return bytes(out), length_size


def is_keyframe(data: bytes) -> bool:
    """Whether Annex B ``data`` holds an IDR slice, where a decoder can start."""
    return any(nal_type(nal) == NAL_IDR for nal in split_annexb(data))


def avc_decoder_config(sps: list[bytes], pps: list[bytes]) -> bytes:
    """The AVCDecoderConfigurationRecord (``avcC`` payload) for 4-byte NAL lengths.

    Profile, compatibility flags and level are the first SPS's (bytes 1-3). For the
    High profiles 14496-15 requires chroma format and bit depths after the PPS list;
    they are read from that SPS. Raises :class:`BitstreamError` without an SPS, or
    with more sets or longer ones than the record's fields can count.
    """
    if not sps or len(sps[0]) < 4:
        raise BitstreamError("an avcC needs at least one SPS")
    if len(sps) > 0x1F or len(pps) > 0xFF:
        raise BitstreamError(f"too many parameter sets for avcC: {len(sps)} SPS, {len(pps)} PPS")
    profile = sps[0][1]
    record = bytearray([1, *sps[0][1:4], 0xFC | 3, 0xE0 | len(sps)])  # 3: 4-byte lengths
    record += _length_prefixed(sps)
    record.append(len(pps))
    record += _length_prefixed(pps)
    if profile in _AVCC_EXTENDED_PROFILES:
        info = _parse_sps(sps[0])
        record += bytes(
            [
                0xFC | info.chroma_format_idc,
                0xF8 | info.bit_depth_luma_minus8,
                0xF8 | info.bit_depth_chroma_minus8,
                0,  # numOfSequenceParameterSetExt
            ]
        )
    return bytes(record)


def _length_prefixed(nals: list[bytes]) -> bytes:
    if any(len(nal) > 0xFFFF for nal in nals):
        raise BitstreamError("a parameter set longer than 65535 bytes does not fit avcC")
    return b"".join(len(nal).to_bytes(2, "big") + nal for nal in nals)


def sps_dimensions(sps: bytes) -> tuple[int, int]:
    """The displayed ``(width, height)`` an SPS describes: coded size minus cropping.

    Raises :class:`BitstreamError` if ``sps`` is not an SPS or ends early.
    """
    info = _parse_sps(sps)
    return info.width, info.height


@dataclass(frozen=True, slots=True)
class _SpsInfo:
    chroma_format_idc: int
    bit_depth_luma_minus8: int
    bit_depth_chroma_minus8: int
    width: int
    height: int


class _Bits:
    """An MSB-first bit reader with Exp-Golomb codes (H.264 §9.1)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def u(self, count: int) -> int:
        value = 0
        for _ in range(count):
            index = self._pos >> 3
            if index >= len(self._data):
                raise BitstreamError("the SPS ends early")
            value = (value << 1) | ((self._data[index] >> (7 - (self._pos & 7))) & 1)
            self._pos += 1
        return value

    def ue(self) -> int:
        zeros = 0
        while self.u(1) == 0:
            zeros += 1
            if zeros > 31:  # no SPS field needs more than 32 bits: garbage
                raise BitstreamError("an Exp-Golomb code longer than 32 bits in the SPS")
        return (1 << zeros) - 1 + self.u(zeros)

    def se(self) -> int:
        code = self.ue()
        return (code + 1) // 2 if code & 1 else -(code // 2)


def _parse_sps(sps: bytes) -> _SpsInfo:
    if not sps or nal_type(sps) != NAL_SPS:
        raise BitstreamError("not an SPS NAL unit")
    # The RBSP is the payload with emulation prevention bytes (00 00 03) undone (§7.4.1).
    bits = _Bits(_EMULATION_PREVENTION.sub(b"\x00\x00", sps[1:]))
    profile = bits.u(8)
    bits.u(16)  # constraint flags, level_idc
    bits.ue()  # seq_parameter_set_id
    chroma, separate_planes, depth_luma, depth_chroma = 1, 0, 0, 0  # defaults (§7.4.2.1.1)
    if profile in _HIGH_PROFILES:
        chroma = bits.ue()
        if chroma == 3:
            separate_planes = bits.u(1)
        depth_luma, depth_chroma = bits.ue(), bits.ue()
        bits.u(1)  # qpprime_y_zero_transform_bypass_flag
        if bits.u(1):  # seq_scaling_matrix_present_flag
            _skip_scaling_lists(bits, 8 if chroma != 3 else 12)
    bits.ue()  # log2_max_frame_num_minus4
    _skip_pic_order_cnt(bits)
    bits.ue()  # max_num_ref_frames
    bits.u(1)  # gaps_in_frame_num_value_allowed_flag
    width_mbs, height_map_units = bits.ue() + 1, bits.ue() + 1
    frame_mbs_only = bits.u(1)
    if not frame_mbs_only:
        bits.u(1)  # mb_adaptive_frame_field_flag
    bits.u(1)  # direct_8x8_inference_flag
    crop = (bits.ue(), bits.ue(), bits.ue(), bits.ue()) if bits.u(1) else (0, 0, 0, 0)
    # Crop units in luma samples (§7.4.2.1.1, equations 7-19 to 7-22).
    field_factor = 2 - frame_mbs_only
    if separate_planes or chroma == 0:
        unit_x, unit_y = 1, field_factor
    else:
        unit_x, unit_y = (1 if chroma == 3 else 2), (2 if chroma == 1 else 1) * field_factor
    return _SpsInfo(
        chroma_format_idc=chroma,
        bit_depth_luma_minus8=depth_luma,
        bit_depth_chroma_minus8=depth_chroma,
        width=width_mbs * 16 - unit_x * (crop[0] + crop[1]),
        height=field_factor * height_map_units * 16 - unit_y * (crop[2] + crop[3]),
    )


def _skip_scaling_lists(bits: _Bits, count: int) -> None:
    # §7.3.2.1.1.1: 4x4 lists have 16 entries, 8x8 lists 64; a list stops early when
    # nextScale becomes 0 (then the rest repeats the last scale).
    for index in range(count):
        if not bits.u(1):  # seq_scaling_list_present_flag
            continue
        last, following = 8, 8
        for _ in range(16 if index < 6 else 64):
            if following:
                following = (last + bits.se() + 256) % 256
            last = following or last


def _skip_pic_order_cnt(bits: _Bits) -> None:
    kind = bits.ue()  # pic_order_cnt_type
    if kind == 0:
        bits.ue()  # log2_max_pic_order_cnt_lsb_minus4
    elif kind == 1:
        bits.u(1)  # delta_pic_order_always_zero_flag
        bits.se()  # offset_for_non_ref_pic
        bits.se()  # offset_for_top_to_bottom_field
        for _ in range(bits.ue()):  # num_ref_frames_in_pic_order_cnt_cycle
            bits.se()
