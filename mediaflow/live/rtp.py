"""RTP for WebRTC viewers, the parts that are the same for every viewer. Pure.

A frame is cut into RTP payloads once (:func:`h264_payloads`: RFC 6184's single
NAL unit packets and FU-A fragments) and kept as an :class:`RtpFrame` that every
viewer's sender reads; a sender only writes the 12-byte header of its own stream
(:class:`RtpHeader`) and the header extensions it negotiated
(:func:`extension_block`) in front of each payload, then encrypts it.

``playout-delay`` (a header extension of libwebrtc's, offered by Chromium for
video) tells the receiver how long it may hold frames back to smooth their
arrival. A live view on a LAN wants none: :func:`answer_with_extension` agrees to it
in the SDP answer, and the video's packets carry :func:`playout_delay` of zero.
Without it Chromium's jitter buffer held frames 0.2-0.3 s although they arrived
evenly (BENCHMARKS.md, live).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# Payloads at most this long: with the RTP header, its extensions and SRTP's tag a
# packet stays well under a 1500-byte Ethernet MTU less IP, UDP and any tunnel.
MAX_PAYLOAD = 1200
NAL_FU_A = 28
PLAYOUT_DELAY_URI = "http://www.webrtc.org/experiments/rtp-hdrext/playout-delay"
MID_URI = "urn:ietf:params:rtp-hdrext:sdes:mid"
ABS_SEND_TIME_URI = "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"
_HEADER = struct.Struct("!BBHII")
_ONE_BYTE_PROFILE = b"\xbe\xde"  # RFC 8285 §4.2


NTP_FROM_UNIX_S = 2_208_988_800  # 1900 to 1970, in seconds


@dataclass(frozen=True, slots=True)
class RtpFrame:
    """One frame's payloads, or a run of sound packets, made once for all viewers.
    ``ticks``: the first payload's time on the media's RTP clock (90 kHz video,
    48 kHz Opus) from the fanout's origin; a viewer adds its own random origin.
    ``spacing``: the ticks from one payload to the next, 0 for the fragments of one
    video frame (they share its time and the last is marked), a packet's duration
    for sound (each packet is a frame of its own)."""

    payloads: tuple[bytes, ...]
    ticks: int
    keyframe: bool
    spacing: int = 0


def h264_payloads(nals: list[bytes], limit: int = MAX_PAYLOAD) -> tuple[bytes, ...]:
    """The RTP payloads of one access unit's NAL units (without start codes), in
    order: each that fits as a single NAL unit packet, each longer one as FU-A
    fragments (RFC 6184 §5.6, §5.8). Raises ``ValueError`` for an empty NAL unit."""
    payloads: list[bytes] = []
    for nal in nals:
        if not nal:
            raise ValueError("an empty NAL unit has no header to send")
        if len(nal) <= limit:
            payloads.append(nal)
            continue
        indicator = (nal[0] & 0xE0) | NAL_FU_A
        kind = nal[0] & 0x1F
        body = memoryview(nal)[1:]
        step = limit - 2
        for start in range(0, len(body), step):
            first, last = start == 0, start + step >= len(body)
            fu_header = kind | (0x80 if first else 0) | (0x40 if last else 0)
            payloads.append(bytes((indicator, fu_header)) + body[start : start + step])
    return tuple(payloads)


@dataclass(frozen=True, slots=True)
class RtpHeader:
    """What one viewer's stream writes in each packet's fixed header (RFC 3550 §5.1:
    version 2, no padding, no CSRC) besides its number and time: its payload type,
    its SSRC and the random origin of its timestamps."""

    payload_type: int
    ssrc: int
    origin: int

    def packets(
        self, frames: list[RtpFrame], sequence: int, extensions: bytes
    ) -> tuple[list[bytes], int]:
        """``frames``' payloads as this stream's packets, numbered from ``sequence``,
        each with ``extensions`` (:func:`extension_block`); and the last one's
        timestamp. A video frame's last packet is marked (``spacing`` 0)."""
        first = 0x90 if extensions else 0x80
        pack, ssrc, out = _HEADER.pack, self.ssrc, []
        timestamp = self.origin & 0xFFFFFFFF
        for frame in frames:
            last = len(frame.payloads) - 1 if frame.spacing == 0 else -1
            for i, payload in enumerate(frame.payloads):
                timestamp = (self.origin + frame.ticks + i * frame.spacing) & 0xFFFFFFFF
                second = self.payload_type | (0x80 if i == last else 0)
                out.append(pack(first, second, sequence, timestamp, ssrc) + extensions + payload)
                sequence = (sequence + 1) & 0xFFFF
        return out, timestamp


def extension_block(elements: list[tuple[int, bytes]]) -> bytes:
    """The one-byte-header extension block (RFC 8285 §4.2) holding ``elements``
    (id 1-14, 1-16 bytes each), padded to 32 bits; empty without elements."""
    if not elements:
        return b""
    body = bytearray()
    for ext_id, value in elements:
        if not 1 <= ext_id <= 14 or not 1 <= len(value) <= 16:
            raise ValueError(f"extension {ext_id} of {len(value)} bytes has no one-byte form")
        body.append(ext_id << 4 | (len(value) - 1))
        body += value
    body += b"\x00" * (-len(body) % 4)
    return _ONE_BYTE_PROFILE + struct.pack("!H", len(body) // 4) + bytes(body)


def playout_delay(min_ms: int, max_ms: int) -> bytes:
    """The playout-delay extension's 3 bytes: two 12-bit delays in 10 ms units."""
    low, high = min_ms // 10, max_ms // 10
    if not (0 <= low <= high <= 0xFFF):
        raise ValueError(f"a playout delay of {min_ms}-{max_ms} ms cannot be sent")
    return bytes(((low >> 4) & 0xFF, ((low & 0xF) << 4) | (high >> 8), high & 0xFF))


def ntp_time(unix_s: float) -> int:
    """``unix_s`` (``time.time()``) as a 64-bit NTP timestamp: seconds since 1900 in
    32.32 fixed point."""
    return int((unix_s + NTP_FROM_UNIX_S) * (1 << 32)) & 0xFFFF_FFFF_FFFF_FFFF


def abs_send_time(ntp: int) -> bytes:
    """The abs-send-time extension's 3 bytes: the 64-bit NTP time's 6.18 fixed point."""
    return ((ntp >> 14) & 0xFFFFFF).to_bytes(3, "big")


def _sections(sdp: str) -> list[list[str]]:
    """The SDP's session part and its media sections, as lists of lines."""
    sections: list[list[str]] = [[]]
    for line in sdp.splitlines():
        if line.startswith("m="):
            sections.append([])
        sections[-1].append(line)
    return sections


def extension_id(sdp: str, kind: str, uri: str) -> int | None:
    """The id ``sdp``'s first ``kind`` section maps ``uri`` to (``a=extmap``), or None."""
    for section in _sections(sdp)[1:]:
        if section[0].startswith(f"m={kind} "):
            for line in section:
                if line.startswith("a=extmap:") and line.split()[-1] == uri:
                    ext_id = line[len("a=extmap:") :].split()[0].split("/")[0]
                    return int(ext_id) if ext_id.isdigit() else None
            return None
    return None


def leaves_dtls_role_open(offer: str) -> bool:
    """Whether ``offer`` lets the answer choose its DTLS role: ``a=setup:actpass``
    wherever it says (RFC 5763 §5), at the session level or in every media section."""
    setups = [line[len("a=setup:") :].strip() for section in _sections(offer)
              for line in section if line.startswith("a=setup:")]  # fmt: skip
    return bool(setups) and all(setup == "actpass" for setup in setups)


def answer_with_extension(offer: str, answer: str, kind: str, uri: str) -> tuple[str, int | None]:
    """``answer`` agreeing to the ``uri`` extension the offer's first ``kind``
    section offers, under the offer's id (RFC 8285 §5), and that id; the answer as
    it is (and None) when the offer does not offer it, the id is not a one-byte
    header's, or the answer has no such section."""
    ext_id = extension_id(offer, kind, uri)
    if ext_id is None or not 1 <= ext_id <= 14 or extension_id(answer, kind, uri) is not None:
        return answer, extension_id(answer, kind, uri)
    sections = _sections(answer)
    for section in sections[1:]:
        if section[0].startswith(f"m={kind} "):
            extmaps = [i for i, line in enumerate(section) if line.startswith("a=extmap:")]
            used = {line[len("a=extmap:") :].split()[0].split("/")[0] for line in section
                    if line.startswith("a=extmap:")}  # fmt: skip
            if str(ext_id) in used:
                return answer, None
            at = extmaps[-1] + 1 if extmaps else len(section)
            section.insert(at, f"a=extmap:{ext_id} {uri}")
            lines = [line for part in sections for line in part]
            return "\r\n".join(lines) + "\r\n", ext_id
    return answer, None
