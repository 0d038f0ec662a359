"""The floor under the WHEP viewers' CPU: the same datagrams, made once, only sent.

What ten WebRTC viewers cost the server is partly the kernel's: on loopback, a UDP
datagram is delivered to the receiving socket (and its reader woken) inside the
sender's system call. This peer sends what the WHEP window's viewers received, at
the same rates, to as many sockets in another process, and does nothing else: each
viewer's video frame (its average size, cut into 1,200-byte payloads, each with a
24-byte RTP header and extensions and a 16-byte SRTP tag) in one segmented
``sendmsg``, as :mod:`mediaflow.live.rtp_wire` sends a frame at best, and each
microphone chunk's Opus packets in one more. No RTP is written and nothing is
encrypted: its CPU is what no Python sender can go under on this machine.

The receivers (``--receive N``, a child process) read and count every datagram, as
a viewer's socket would be read, and decode nothing.

Run as ``python -m bench.live.floor --viewers N --seconds S --frame-bytes B
--sound-bytes P`` (P: one Opus packet); it prints one result line
(:func:`bench._lib.common.emit_result`) with its CPU in cores and what arrived.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import resource
import socket
import subprocess
import sys
import time
from typing import Any

from bench._lib.common import emit_result

# mediaflow.live.rtp.MAX_PAYLOAD (bench imports only public names; a test ties the two)
PAYLOAD = 1200
OVERHEAD = 12 + 12 + 16  # RTP header, its extensions, the SRTP tag
UDP_SEGMENT = 103
FPS = 30
CHUNKS_PER_S = 10  # the microphone's 100 ms chunks
PACKETS_PER_CHUNK = 5  # 20 ms Opus packets


def frame_datagrams(frame_bytes: int) -> list[int]:
    """The datagram sizes of a video frame of ``frame_bytes``. Pure."""
    count = max(1, math.ceil(frame_bytes / PAYLOAD))
    last = frame_bytes - (count - 1) * PAYLOAD
    return [PAYLOAD + OVERHEAD] * (count - 1) + [max(1, last) + OVERHEAD]


def _segmented(sock: socket.socket, sizes: list[int], address: tuple[str, int]) -> None:
    if len(sizes) == 1:
        sock.sendto(bytes(sizes[0]), address)
        return
    segment = sizes[0].to_bytes(2, sys.byteorder)
    sock.sendmsg([bytes(sum(sizes))], [(socket.SOL_UDP, UDP_SEGMENT, segment)], 0, address)


def send(ports: list[int], seconds: float, frame_bytes: int, sound_bytes: int) -> dict[str, Any]:
    """Send to ``ports`` for ``seconds`` (module doc); the sender's CPU over it."""
    sockets = []
    for _ in ports:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setblocking(False)
        sockets.append(sock)
    video = frame_datagrams(frame_bytes)
    sound = [sound_bytes + OVERHEAD] * PACKETS_PER_CHUNK
    addresses = [("127.0.0.1", port) for port in ports]
    started, before = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
    sent = refused = 0
    tick = 0
    while (due := started + tick / FPS) < started + seconds:
        time.sleep(max(0.0, due - time.monotonic()))
        for sock, address in zip(sockets, addresses, strict=True):
            try:
                _segmented(sock, video, address)
                sent += len(video)
                if tick % (FPS // CHUNKS_PER_S) == 0:
                    _segmented(sock, sound, address)
                    sent += len(sound)
            except BlockingIOError:
                refused += 1
        tick += 1
    after, elapsed = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - started
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cores": cpu / elapsed, "seconds": elapsed, "sent": sent, "refused": refused}


async def receive(count: int) -> None:
    """``count`` sockets on loopback: their ports on stdout, then each datagram read
    and counted until stdin closes; the count on stdout."""
    loop = asyncio.get_running_loop()
    received = [0]

    class Counting(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: Any) -> None:
            received[0] += 1

    ports = []
    for _ in range(count):
        transport, _ = await loop.create_datagram_endpoint(Counting, local_addr=("127.0.0.1", 0))
        ports.append(transport.get_extra_info("sockname")[1])
    print(" ".join(map(str, ports)), flush=True)
    await loop.run_in_executor(None, sys.stdin.read)
    print(received[0], flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.live.floor", description=__doc__)
    p.add_argument("--viewers", type=int, default=10)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--frame-bytes", type=int, default=11_500, help="a video frame, on average")
    p.add_argument("--sound-bytes", type=int, default=80, help="an Opus packet")
    p.add_argument("--receive", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.receive:
        asyncio.run(receive(args.receive))
        return 0
    command = [sys.executable, "-m", "bench.live.floor", "--receive", str(args.viewers)]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    result: dict[str, Any]
    try:
        ports = [int(port) for port in child.stdout.readline().split()]
        if len(ports) != args.viewers:
            raise RuntimeError("the receivers did not start")
        result = send(ports, args.seconds, args.frame_bytes, args.sound_bytes)
        time.sleep(0.2)  # the last datagrams read
        child.stdin.close()
        result["received"] = int(child.stdout.readline() or 0)
    except (OSError, RuntimeError, ValueError) as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
    emit_result(result)
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    raise SystemExit(main())
