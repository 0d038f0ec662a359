"""The peer of a scale rung: the same cameras and microphones with no pipeline around them.

- each camera is one ``ffmpeg`` command on the same lavfi ``testsrc2`` 1280x720 at 30
  frames/s, paced in real time (``-re``), writing a JPEG of every frame (mjpeg,
  ``-q:v 4``, the quantiser that matched quality 85 in ``bench.capture``) and 2 s
  fragmented-MP4 H.264 segments with the connector's settings (veryfast, no
  B-frames), to files, as a home-grown capture script would;
- the microphones are one Python process running pocketsphinx's own live pattern
  (an ``Endpointer`` and a streaming ``Decoder`` per stream, the grammar, a partial
  hypothesis per chunk) on the same speech in the same 100 ms chunks, paced in real
  time. mediaflow's speech node also decodes each utterance a second time, whole,
  for its finals (docs/speech.md): that work is not in the peer.

Neither stores anything durably, serves anything or records a clip. :func:`run_peers`
runs them all at once for ``seconds`` and gives their CPU (``RUSAGE_CHILDREN``) in
cores, and whether they kept real time.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
import wave
from dataclasses import dataclass
from pathlib import Path

from bench._lib.demo import DEMO_DIR
from bench.scale.flow import ScaleFlow

LATE_S = 0.5  # a peer this far behind its deadlines has not kept real time


def camera_command(flow: ScaleFlow, seconds: float, outdir: Path) -> list[str]:
    source = f"testsrc2=size={flow.size}:rate={flow.rate}"
    gop = str(round(flow.rate * flow.segment_s))
    return [
        "ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-re",
        "-t", f"{seconds:g}", "-f", "lavfi", "-i", source,
        "-map", "0:v", "-c:v", "mjpeg", "-q:v", "4", "-pix_fmt", "yuvj420p",
        "-f", "image2", "-y", str(outdir / "frame%06d.jpg"),
        "-map", "0:v", "-c:v", "libx264", "-preset", "veryfast", "-bf", "0",
        "-g", gop, "-keyint_min", gop, "-sc_threshold", "0",
        "-f", "segment", "-segment_time", f"{flow.segment_s:g}", "-segment_format", "mp4",
        "-segment_format_options", "movflags=+frag_keyframe+empty_moov+default_base_moof",
        "-y", str(outdir / "segment%05d.mp4"),
    ]  # fmt: skip


@dataclass(frozen=True)
class PeerResult:
    seconds: float
    cores: float
    camera_wall_s: list[float]
    speech_late_s: float | None
    finals: int | None
    errors: list[str]

    @property
    def real_time(self) -> bool:
        late_cameras = [wall for wall in self.camera_wall_s if wall > self.seconds + 3.0]
        speech_late = self.speech_late_s is not None and self.speech_late_s > LATE_S
        return not late_cameras and not speech_late and not self.errors


def run_peers(flow: ScaleFlow, seconds: float, workdir: Path) -> PeerResult:
    """Run every camera's ffmpeg and the microphones' process together (module doc)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cameras: list[tuple[subprocess.Popen[bytes], float]] = []
    for i in range(flow.cameras):
        outdir = workdir / f"peer-cam{i}"
        outdir.mkdir(parents=True, exist_ok=True)
        command = camera_command(flow, seconds, outdir)
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        cameras.append((proc, time.monotonic()))
    speech = None
    if flow.microphones:
        command = [sys.executable, "-m", "bench.scale.peer", str(flow.microphones)]
        command += [f"{seconds:g}", str(flow.chunk_ms)]
        speech = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    errors: list[str] = []
    walls: list[float] = []
    for proc, started in cameras:
        _, err = proc.communicate(timeout=seconds * 3 + 60)
        walls.append(time.monotonic() - started)
        if proc.returncode != 0:
            errors.append(f"ffmpeg exited {proc.returncode}: {err.decode(errors='replace')[-300:]}")
    late = finals = None
    if speech is not None:
        out, err = speech.communicate(timeout=seconds * 3 + 120)
        if speech.returncode != 0:
            errors.append(f"speech peer exited {speech.returncode}: {err.decode()[-300:]}")
        else:
            body = json.loads(out.decode().strip().splitlines()[-1])
            late, finals = body["late_s"], body["finals"]
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return PeerResult(seconds, cpu / seconds, walls, late, finals, errors)


def speech_peer(streams: int, seconds: float, chunk_ms: int) -> dict[str, float | int]:
    """pocketsphinx's live pattern on ``streams`` copies of the demo's speech, paced."""
    from pocketsphinx import Decoder, Endpointer  # type: ignore[import-untyped]

    with wave.open(str(DEMO_DIR / "speech" / "commands.wav"), "rb") as wav:
        pcm = wav.readframes(wav.getnframes())
    grammar = (DEMO_DIR / "grammar" / "commands.gram").read_text()
    pipes = []
    for _ in range(streams):
        endpointer = Endpointer(vad_mode=0, sample_rate=16000)
        decoder = Decoder(samprate=16000, lm=None, bestpath=False, loglevel="FATAL")
        decoder.add_jsgf_string("grammar", grammar)
        decoder.activate_search("grammar")
        pipes.append((endpointer, decoder))
    frame = pipes[0][0].frame_bytes
    chunk = 16000 * 2 * chunk_ms // 1000
    ticks = round(seconds * 1000 / chunk_ms)
    finals, late, pending = 0, 0.0, [b""] * streams
    start = time.monotonic()
    for tick in range(ticks):
        offset = (tick * chunk) % (len(pcm) - chunk)
        for index, (endpointer, decoder) in enumerate(pipes):
            pending[index] += pcm[offset : offset + chunk]
            while len(pending[index]) >= frame:
                piece, pending[index] = pending[index][:frame], pending[index][frame:]
                was_in_speech = endpointer.in_speech
                speech = endpointer.process(piece)
                if speech is None:
                    continue
                if not was_in_speech:
                    decoder.start_utt()
                decoder.process_raw(speech, False, False)
                decoder.hyp()  # the partial, as the live example prints it
                if not endpointer.in_speech:
                    decoder.end_utt()
                    finals += decoder.hyp() is not None
        deadline = start + (tick + 1) * chunk_ms / 1000
        now = time.monotonic()
        late = max(late, now - deadline)
        if deadline > now:
            time.sleep(deadline - now)
    return {"late_s": late, "finals": finals}


if __name__ == "__main__":
    count, duration, chunk_ms = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(speech_peer(count, duration, chunk_ms)))
