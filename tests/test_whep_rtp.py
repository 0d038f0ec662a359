"""RTP as the WHEP viewers get it (mediaflow.live.rtp), read back by aiortc's own
parsers: the H.264 payloads (RFC 6184), the fixed header and its extensions
(RFC 3550, RFC 8285), and the answer that agrees to playout-delay."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from aiortc.clock import datetime_to_ntp
from aiortc.codecs.h264 import H264PayloadDescriptor
from aiortc.rtcrtpparameters import RTCRtpHeaderExtensionParameters, RTCRtpParameters
from aiortc.rtp import HeaderExtensionsMap, RtpPacket

from mediaflow.live.rtp import (
    ABS_SEND_TIME_URI,
    MAX_PAYLOAD,
    MID_URI,
    PLAYOUT_DELAY_URI,
    RtpFrame,
    RtpHeader,
    abs_send_time,
    answer_with_extension,
    extension_block,
    extension_id,
    h264_payloads,
    leaves_dtls_role_open,
    ntp_time,
    playout_delay,
)
from mediaflow.live.rtp_wire import batches

SPS, PPS = b"\x67\x42\xc0\x1f\xda", b"\x68\xce\x3c\x80"
IDR = b"\x65" + bytes(range(256)) * 20  # 5,121 bytes: five fragments
SLICE = b"\x41\x9a\x02"


def test_h264_payloads_read_back_as_the_access_unit() -> None:
    payloads = h264_payloads([SPS, PPS, IDR, SLICE])
    assert payloads[:2] == (SPS, PPS) and payloads[-1] == SLICE  # single NAL unit packets
    fragments = payloads[2:-1]
    assert len(fragments) == 5 and all(len(p) <= MAX_PAYLOAD for p in payloads)
    assert [p[0] for p in fragments] == [0x7C] * 5  # FU-A with the IDR's NRI (3)
    assert [p[1] >> 6 for p in fragments] == [0b10, 0, 0, 0, 0b01]  # start ... end
    annexb = b"".join(H264PayloadDescriptor.parse(p)[1] for p in payloads)
    assert annexb == b"".join(b"\x00\x00\x00\x01" + nal for nal in (SPS, PPS, IDR, SLICE))


def test_a_nal_that_just_fits_is_not_fragmented() -> None:
    nal = b"\x41" + b"\x07" * (MAX_PAYLOAD - 1)
    assert h264_payloads([nal]) == (nal,)
    longer = nal + b"\x08"
    assert [len(p) for p in h264_payloads([longer])] == [MAX_PAYLOAD, 4]  # 2 + 2 left
    with pytest.raises(ValueError, match="empty NAL"):
        h264_payloads([b""])


def test_the_header_and_extensions_read_back_in_aiortc() -> None:
    mid, send_time = b"0", abs_send_time(0x1234_5678_9ABC_DEF0)
    extensions = extension_block([(3, mid), (2, send_time), (12, playout_delay(0, 0))])
    assert len(extensions) % 4 == 0
    header = RtpHeader(payload_type=102, ssrc=0xDEADBEEF, origin=2**32 - 2)
    frames = [RtpFrame((b"first", b"second"), 9, True), RtpFrame((b"next",), 3009, False)]
    out, last = header.packets(frames, 0xFFFF, extensions)
    packets = [RtpPacket.parse(p, _extension_map()) for p in out]
    assert [p.sequence_number for p in packets] == [0xFFFF, 0, 1]  # numbers wrap
    assert [p.timestamp for p in packets] == [7, 7, 3007] and last == 3007  # so do times
    assert [p.marker for p in packets] == [0, 1, 1]  # a frame's last packet is marked
    assert all((p.version, p.payload_type, p.ssrc) == (2, 102, 0xDEADBEEF) for p in packets)
    assert packets[0].extensions.mid == "0"
    assert packets[0].extensions.abs_send_time == (0x1234_5678_9ABC_DEF0 >> 14) & 0xFFFFFF
    assert [p.payload for p in packets] == [b"first", b"second", b"next"]
    sound = RtpFrame((b"a", b"b", b"c"), 100, True, spacing=960)  # a run of Opus packets
    out, last = RtpHeader(111, 3, 0).packets([sound], 1, b"")
    plain = [RtpPacket.parse(p) for p in out]
    assert [(p.timestamp, p.marker, p.payload) for p in plain] == [
        (100, 0, b"a"), (1060, 0, b"b"), (2020, 0, b"c")
    ]  # fmt: skip
    assert extension_block([]) == b""
    with pytest.raises(ValueError, match="one-byte form"):
        extension_block([(15, b"x")])


def test_the_ntp_time_is_aiortcs() -> None:
    now = time.time()
    assert abs(ntp_time(now) - datetime_to_ntp(datetime.fromtimestamp(now, UTC))) < 2**32 // 1000


def _extension_map() -> HeaderExtensionsMap:
    extensions = HeaderExtensionsMap()
    extensions.configure(
        RTCRtpParameters(
            headerExtensions=[
                RTCRtpHeaderExtensionParameters(id=3, uri=MID_URI),
                RTCRtpHeaderExtensionParameters(id=2, uri=ABS_SEND_TIME_URI),
            ]
        )
    )
    return extensions


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [(0, 0, b"\x00\x00\x00"), (100, 500, b"\x00\xa0\x32"), (40950, 40950, b"\xff\xff\xff")],
)
def test_playout_delay_is_two_12_bit_counts_of_10_ms(low: int, high: int, expected: bytes) -> None:
    assert playout_delay(low, high) == expected


def test_a_playout_delay_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot be sent"):
        playout_delay(200, 100)


OFFER = (
    "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"
    "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\n"
    f"a=extmap:12 {PLAYOUT_DELAY_URI}\r\n"  # not in audio: the answer's audio gets none
    "m=video 9 UDP/TLS/RTP/SAVPF 102\r\na=mid:1\r\n"
    f"a=extmap:4 {MID_URI}\r\na=extmap:12 {PLAYOUT_DELAY_URI}\r\n"
)
ANSWER = (
    "v=0\r\no=- 3 4 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"
    "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:0\r\n"
    "m=video 9 UDP/TLS/RTP/SAVPF 102\r\na=mid:1\r\n"
    f"a=extmap:4 {MID_URI}\r\na=rtcp-mux\r\n"
)


def test_the_answer_agrees_to_the_playout_delay_offered_for_video() -> None:
    answer, ext_id = answer_with_extension(OFFER, ANSWER, "video", PLAYOUT_DELAY_URI)
    assert ext_id == 12
    assert extension_id(answer, "video", PLAYOUT_DELAY_URI) == 12
    assert extension_id(answer, "audio", PLAYOUT_DELAY_URI) is None
    assert f"a=extmap:4 {MID_URI}\r\na=extmap:12 {PLAYOUT_DELAY_URI}\r\na=rtcp-mux" in answer
    assert answer.replace(f"a=extmap:12 {PLAYOUT_DELAY_URI}\r\n", "") == ANSWER


@pytest.mark.parametrize(
    "offer",
    [
        OFFER.replace(f"a=extmap:12 {PLAYOUT_DELAY_URI}\r\n", ""),  # not offered
        OFFER.replace("a=extmap:12 ", "a=extmap:4 "),  # its id is taken in the answer
        OFFER.replace("a=extmap:12 ", "a=extmap:200 "),  # a two-byte header's id
    ],
)
def test_the_answer_stays_as_it_is_without_a_usable_offer(offer: str) -> None:
    assert answer_with_extension(offer, ANSWER, "video", PLAYOUT_DELAY_URI) == (ANSWER, None)


@pytest.mark.parametrize(
    ("setups", "open_"),
    [
        (["actpass", "actpass"], True),  # browsers, aiortc, GStreamer: the answer chooses
        (["actpass", "active"], False),  # a section where the offerer chose
        (["passive", "passive"], False),  # the offerer is the DTLS server
        ([], False),  # no setup at all: RFC 4145's default is active
    ],
)
def test_an_offer_leaves_the_dtls_role_open_only_with_actpass_throughout(
    setups: list[str], open_: bool
) -> None:
    sections = OFFER.split("m=")
    with_setups = sections[0] + "".join(
        f"m={body}" + (f"a=setup:{setups[i]}\r\n" if setups else "")
        for i, body in enumerate(sections[1:])
    )
    assert leaves_dtls_role_open(with_setups) is open_


@pytest.mark.parametrize(
    ("sizes", "runs"),
    [
        ([], []),
        ([1222] * 5 + [300], [(0, 6)]),  # a frame's fragments: one call
        ([40, 30, 1222, 1222, 500], [(0, 2), (2, 5)]),  # 40 then shorter 30; then the IDR
        ([100, 200], [(0, 1), (1, 2)]),  # a longer one starts a run of its own
        ([1222] * 70, [(0, 49), (49, 70)]),  # 60,000 bytes at most in one call
        ([10] * 130, [(0, 64), (64, 128), (128, 130)]),  # 64 datagrams at most
    ],
)
def test_a_frame_is_sent_in_runs_of_one_size(sizes: list[int], runs: list[tuple[int, int]]) -> None:
    assert batches(sizes) == runs
