"""A WHEP viewer's packets on their way out (mediaflow.live.rtp_wire, the sound
runs of mediaflow.live.fanout): encrypted into one buffer exactly as libsrtp's
own ``protect`` does it one by one, kept for NACKs, and Opus timed on RTP's clock
whatever rate the microphone has."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from pylibsrtp import Policy, Session

from mediaflow.live.opus import OPUS_PACKET_TICKS, OpusEncoder, sound_runs
from mediaflow.live.rtp import RtpFrame, RtpHeader
from mediaflow.live.rtp_wire import History, Sealer, batches

KEY = bytes(range(44))  # AES-256-GCM: 32 bytes of key, 12 of salt


def _sessions() -> tuple[Session, Session]:
    """A sender's and a receiver's SRTP sessions on one key (as DTLS would key them)."""

    def policy(direction: int) -> Policy:
        made = Policy(key=KEY, ssrc_type=direction,
                      srtp_profile=Policy.SRTP_PROFILE_AEAD_AES_256_GCM)  # fmt: skip
        made.allow_repeat_tx = True
        return made

    return Session(policy(Policy.SSRC_ANY_OUTBOUND)), Session(policy(Policy.SSRC_ANY_INBOUND))


def _packets(count: int, first: int = 7) -> list[bytes]:
    frame = RtpFrame((*(os.urandom(1200) for _ in range(count - 1)), b"tail"), 0, True)
    out, _ = RtpHeader(payload_type=102, ssrc=0xBEEF, origin=5).packets([frame], first, b"")
    return out


def test_a_run_sealed_into_one_buffer_is_what_protect_makes_of_each() -> None:
    sender, receiver = _sessions()
    plain = _packets(6)
    sealed = Sealer(sender).seal(plain)
    assert len(sealed) == 6 and len(sealed.view) == sealed.ends[-1]
    # Each lies right after the one before: a run is one buffer for a segmented send.
    assert batches(sealed.sizes()) == [(0, 6)]
    assert [receiver.unprotect(bytes(sealed.span(i, i + 1))) for i in range(6)] == plain
    assert bytes(sealed.span(1, 3)) == bytes(sealed.span(1, 2)) + bytes(sealed.span(2, 3))


def test_without_the_bindings_each_packet_goes_through_protect() -> None:
    sender, receiver = _sessions()
    plain = _packets(3)
    sealer = Sealer(sender)
    sealer._srtp = None  # as with a pylibsrtp whose bindings moved
    sealed = sealer.seal(plain)
    assert [receiver.unprotect(bytes(sealed.span(i, i + 1))) for i in range(3)] == plain


def test_the_history_holds_the_newest_packets_across_the_wrap() -> None:
    sender, _ = _sessions()
    sealer, history = Sealer(sender), History(limit=8)
    first = 0xFFFC
    for _ in range(4):  # four runs of three: 0xFFFC ... 7
        history.keep(first, sealer.seal(_packets(3, first)))
        first = (first + 3) & 0xFFFF
    assert history.newest == 7
    assert history.find(0xFFFC) is None and history.find(0xFFFE) is None  # let go
    assert all(history.find(n & 0xFFFF) is not None for n in range(0xFFFF, 0x10008))
    assert history.find(8) is None  # not sent yet
    found = history.find(0)
    assert found is not None and found[1] and bytes(found[0])[2:4] == b"\x00\x00"


def test_sound_packets_run_until_a_gap() -> None:
    packets = [(0, b"a"), (960, b"b"), (1920, b"c"), (4800, b"d"), (5760, b"e")]
    runs = sound_runs(packets)
    assert [(r.payloads, r.ticks, r.spacing) for r in runs] == [
        ((b"a", b"b", b"c"), 0, OPUS_PACKET_TICKS), ((b"d", b"e"), 4800, OPUS_PACKET_TICKS)
    ]  # fmt: skip
    assert sound_runs([]) == []


@pytest.mark.parametrize(("rate", "channels"), [(16000, 1), (48000, 2), (44100, 1)])
def test_opus_is_timed_on_the_48_khz_clock_at_any_rate(rate: int, channels: int) -> None:
    encoder = OpusEncoder()
    chunk = rate // 10  # 100 ms
    tone = (np.sin(np.arange(chunk * 5) * 0.3) * 8000).astype(np.int16)
    pcm = np.repeat(tone[:, None], channels, axis=1)
    packets = [p for start in range(0, len(pcm), chunk)
               for p in encoder.encode(pcm[start : start + chunk], rate, channels)]  # fmt: skip
    assert len(packets) >= 20  # 0.5 s of 20 ms packets, less what the encoder holds
    times = [pts for pts, _ in packets]
    assert all(b - a == OPUS_PACKET_TICKS for a, b in itertools.pairwise(times))
    assert len({len(data) for _, data in packets[1:]}) == 1  # constant bitrate: one size
