"""One chaos run: real file sources, a slow consumer and a recorder, killed N times.

The flow (written to the run's directory)::

    mic  (connector = "microphone", device = "file:speech.wav", paced in real time)
    cam  (connector = "camera", device = "file:clip.mp4", paced in real time)
    sink (bench.chaos.nodes:ChunkLog, reads mic.audio, delay_s = chunk * factor)
    rec  (recorder, reads cam.video and mic.audio, clips of clip_s)

``mediaflow run FLOW --until-idle --jsonl`` runs it (and, on Redis, one ``mediaflow
worker FLOW`` shares the work and the data directory). Kill points are drawn from
``random.Random(seed)`` before the run starts: N microphone seqs spread uniformly over
2-95 % of the stream, each followed by a random delay of up to ``jitter_s``, and a
victim for each (SQLite: the run; Redis: the run, the worker or Redis itself, each at
least once when N >= 3). When the run prints a seq at or past the next point (the
sources are capturing: a kill never lands in a start-up), the victim gets SIGKILL and
is started again at once (Redis after ``redis_down_s``, on the same port, with its
append-only file). After the last kill the run drains to idle and exits; the worker
gets SIGTERM. Then :mod:`bench.chaos.check` judges what was left.
"""

from __future__ import annotations

import random
import shutil
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.chaos.check import as_json, check_clips, check_deliveries, source_facts
from bench.chaos.media import make_video, make_wav, wav_samples
from bench.chaos.procs import MediaflowProcess, RedisProcess, SourceProgress, child_env

Json = dict[str, Any]
FLOW = "chaos"
MEDIA_SEED = 1234  # the media do not depend on --seed: only the kills do


class ChaosTimeout(Exception):
    """The run overran its budget."""


@dataclass(frozen=True)
class ChaosPlan:
    backend: str = "sqlite"  # or "redis"
    chunks: int = 10_000
    chunk_ms: int = 100
    kills: int = 20
    seed: int = 0
    consumer_factor: float = 1.2  # the consumer takes this many chunk lengths per chunk
    fps: int = 10
    segment_s: float = 1.0
    clip_s: float = 2.0
    lease_ms: int = 3000
    rate: int = 16000
    jitter_s: float = 0.3
    redis_down_s: tuple[float, float] = (0.2, 2.0)
    timeout_s: float = 3600.0
    victims: tuple[str, ...] = ()  # who may be killed; () = the backend's (module doc)

    @property
    def seconds(self) -> float:
        return self.chunks * self.chunk_ms / 1000

    @property
    def chunk_bytes(self) -> int:
        return self.rate * self.chunk_ms // 1000 * 2


@dataclass(frozen=True)
class Kill:
    index: int
    victim: str
    at_s: float  # since the first start
    seq: int  # the microphone's newest seq the run had printed
    target: int
    capturing: bool  # the source had emitted within a second, and not its last chunk
    # Until the victim was back: the source emitting again (run, Redis), the worker
    # joined; None if the source had finished meanwhile.
    back_s: float | None = None


def kill_schedule(plan: ChaosPlan) -> list[tuple[int, str, float]]:
    """``(target seq, victim, extra delay)`` per kill, sorted by seq (module doc)."""
    rng = random.Random(plan.seed)
    low, high = max(1, int(plan.chunks * 0.02)), max(2, int(plan.chunks * 0.95))
    targets = sorted(rng.randint(low, high) for _ in range(plan.kills))
    default = ("run", "worker", "redis") if plan.backend == "redis" else ("run",)
    kinds = list(plan.victims or default)
    victims = kinds[: plan.kills] + rng.choices(kinds, k=max(0, plan.kills - len(kinds)))
    rng.shuffle(victims)
    return [(t, v, rng.uniform(0, plan.jitter_s)) for t, v in zip(targets, victims, strict=True)]


def make_media(plan: ChaosPlan, where: Path) -> tuple[Path, Path]:
    """The WAV and the video for ``plan`` (made once per length, then reused)."""
    where.mkdir(parents=True, exist_ok=True)
    stem = f"{plan.seconds:g}s-{plan.rate}"
    wav, video = where / f"speech-{stem}.wav", where / f"clip-{plan.seconds:g}s-{plan.fps}.mp4"
    if not wav.exists():
        make_wav(wav.with_suffix(".tmp"), seconds=plan.seconds, rate=plan.rate, seed=MEDIA_SEED)
        wav.with_suffix(".tmp").rename(wav)
    if not video.exists():
        part = video.with_name(video.stem + ".part.mp4")
        make_video(part, seconds=plan.seconds, fps=plan.fps)
        part.rename(video)
    return wav, video


def write_flow(plan: ChaosPlan, where: Path, wav: Path, video: Path) -> Path:
    delay = plan.chunk_ms / 1000 * plan.consumer_factor
    flow = where / "chaos.toml"
    flow.write_text(
        f'[flow]\nname = "{FLOW}"\n\n'
        f'[[node]]\nid = "mic"\nconnector = "microphone"\ndevice = "file:{wav}"\n'
        f"rate = {plan.rate}\nchunk_ms = {plan.chunk_ms}\n\n"
        f'[[node]]\nid = "cam"\nconnector = "camera"\ndevice = "file:{video}"\n'
        f"fps = 2\nsegment_s = {plan.segment_s}\n\n"
        f'[[node]]\nid = "sink"\nuse = "bench.chaos.nodes:ChunkLog"\n'
        f'log_dir = "{where / "deliveries"}"\ndelay_s = {delay:.6f}\n'
        'inputs = { audio = "mic.audio" }\n\n'
        f'[[node]]\nid = "rec"\nuse = "recorder"\nclip_s = {plan.clip_s}\n'
        'inputs = { video = "cam.video", audio = "mic.audio" }\n'
    )
    return flow


@dataclass
class Cast:
    """The processes of one run."""

    run: MediaflowProcess
    worker: MediaflowProcess | None
    redis: Any  # RedisProcess or tests.redis_server.RedisServer: start(), kill(), url
    unexpected: list[str] = field(default_factory=list)

    def check_alive(self) -> None:
        """Restart a mediaflow process that exited on its own (and note it)."""
        for proc in (self.run, self.worker):
            if proc is not None and proc.poll() is not None:
                self.unexpected.append(f"{proc.role} (start {proc.starts}) exited {proc.poll()}")
                proc.start()


def run_chaos(
    plan: ChaosPlan,
    where: Path,
    *,
    media_dir: Path | None = None,
    redis: Any = None,
    progress: Callable[[str], None] = lambda _: None,
) -> Json:
    """Run ``plan`` in ``where`` (made fresh) and return the report (module doc).

    ``redis``: a started durable Redis to use (``tests.redis_server.launch(...,
    appendonly=True)``); by default one is started here and stopped at the end.
    Raises :class:`ChaosTimeout` past ``plan.timeout_s`` (every process it started
    is ended first).
    """
    shutil.rmtree(where, ignore_errors=True)
    (where / "logs").mkdir(parents=True)
    wav, video = make_media(plan, media_dir or where / "media")
    flow = write_flow(plan, where, wav, video)
    data = where / "data"
    own_redis = None
    queue_url = None
    if plan.backend == "redis":
        if redis is None:
            redis = own_redis = RedisProcess(where / "redis")
            redis.start()
        queue_url = f"{redis.url}?prefix=chaos-{uuid.uuid4().hex[:8]}"
    env = child_env(queue_url, plan.lease_ms)
    mic = SourceProgress("mic", "audio")
    run_args = ["run", str(flow), "--until-idle", "--jsonl", "--data", str(data), "-v"]
    cast = Cast(MediaflowProcess("run", run_args, env, where / "logs", mic), None, redis)
    if plan.backend == "redis":
        worker_args = ["worker", str(flow), "--jsonl", "--data", str(data), "-v"]
        cast.worker = MediaflowProcess("worker", worker_args, env, where / "logs")
    deadline = time.monotonic() + plan.timeout_s
    started = time.monotonic()
    kills: list[Kill] = []
    try:
        cast.run.start()
        if cast.worker is not None:
            cast.worker.start()
            cast.worker.wait_ready(deadline)
        for index, (target, victim, extra) in enumerate(kill_schedule(plan), 1):
            kill = strike(plan, cast, mic, index, target, victim, extra, started, deadline)
            kills.append(kill)
            progress(
                f"[{plan.backend}] kill {index}/{plan.kills} at {kill.at_s:.1f} s: {victim}"
                f" (mic seq {kill.seq}, target {target})"
                + (f", back after {kill.back_s:.1f} s" if kill.back_s is not None else "")
            )
        progress(f"[{plan.backend}] kills done; draining to idle")
        code = drain(cast, deadline)
        worker_code = cast.worker.terminate() if cast.worker is not None else None
        wall = time.monotonic() - started
        facts = source_facts(queue_url, data, FLOW)
    finally:
        for proc in (cast.run, cast.worker):
            if proc is not None:
                proc.kill()
        if own_redis is not None:
            own_redis.stop()
    emitted = facts.latest_seq.get("mic.audio", -1) + 1
    deliveries = check_deliveries(
        where / "deliveries", wav_samples(wav), plan.chunk_bytes, emitted, len(facts.dead_letters)
    )
    clips = check_clips(data)
    backs = [k.back_s for k in kills if k.back_s is not None]
    ok = deliveries.ok and clips.ok and code == 0 and not cast.unexpected
    ok = ok and all(k.capturing for k in kills)
    return {
        "plan": {**asdict(plan), "seconds": plan.seconds},
        "kills": [asdict(k) for k in kills],
        "run_exit": code,
        "worker_exit": worker_code,
        "unexpected_exits": cast.unexpected,
        "wall_s": round(wall, 1),
        "back_s_median": round(statistics.median(backs), 2) if backs else None,
        "latest_seq": facts.latest_seq,
        "dead_letters": facts.dead_letters[:20],
        "deliveries": as_json(deliveries),
        "clips": as_json(clips),
        "log_problems": log_problems(where / "logs"),
        "ok": ok,
    }


def strike(
    plan: ChaosPlan,
    cast: Cast,
    mic: SourceProgress,
    index: int,
    target: int,
    victim: str,
    extra: float,
    started: float,
    deadline: float,
) -> Kill:
    """Wait until the run has printed seq ``target`` (from its current start), wait
    ``extra``, kill ``victim`` and start it again."""
    while True:
        seq, emitted, _ = mic.snapshot()
        if emitted > 0 and seq >= target:
            break
        if time.monotonic() > deadline:
            raise ChaosTimeout(f"kill {index}: the source never reached seq {target} (at {seq})")
        cast.check_alive()
        time.sleep(0.005)
    time.sleep(extra)
    seq, _, last_at = mic.snapshot()
    capturing = time.monotonic() - last_at < 1.0 and seq < plan.chunks - 1
    now = time.monotonic()
    at_s = now - started
    if victim == "run":
        cast.run.kill()
        cast.run.start()
    elif victim == "worker":
        assert cast.worker is not None
        cast.worker.kill()
        cast.worker.start()
        # Started again against a Redis that is down, a worker exits 1 (documented): the
        # next victim waits until this one has joined.
        cast.worker.wait_ready(deadline)
        back_s: float | None = round(time.monotonic() - now, 3)
    else:
        cast.redis.kill()
        time.sleep(random.Random(plan.seed * 1000 + index).uniform(*plan.redis_down_s))
        cast.redis.start()
    if victim != "worker":
        back_s = wait_capturing(mic, now, plan.chunks, deadline)
    return Kill(index, victim, round(at_s, 3), seq, target, capturing, back_s)


def wait_capturing(
    mic: SourceProgress, killed_at: float, chunks: int, deadline: float
) -> float | None:
    """Seconds from the kill until the run prints a microphone seq again (None if the
    source had emitted its last chunk)."""
    while time.monotonic() < deadline:
        seq, emitted, last_at = mic.snapshot()
        if emitted > 0 and last_at > killed_at:
            return round(last_at - killed_at, 3)
        if seq >= chunks - 1:
            return None
        time.sleep(0.005)
    raise ChaosTimeout("the source did not emit again after a kill")


def drain(cast: Cast, deadline: float) -> int | None:
    """Wait for the run to finish (``--until-idle``); its exit status."""
    while time.monotonic() < deadline:
        code = cast.run.wait(1.0)
        if code is not None:
            return code
        if cast.worker is not None and cast.worker.poll() is not None:
            cast.check_alive()
    raise ChaosTimeout("the run did not drain in time")


# Logged as errors, expected while Redis is down: every executor says so once per outage.
EXPECTED_ERRORS = ("queue_unavailable", "work queue unavailable")


def log_problems(logs: Path, limit: int = 12) -> list[str]:
    """Tracebacks and ERROR lines the processes logged (first ``limit``), but for
    the queue being unavailable while Redis was down."""
    found: list[str] = []
    for path in sorted(logs.glob("*.err")):
        for line in path.read_text(errors="replace").splitlines():
            if any(expected in line for expected in EXPECTED_ERRORS):
                continue
            if " ERROR " in line or line.startswith("Traceback") or "Error:" in line:
                found.append(f"{path.stem}: {line[:240]}")
                if len(found) >= limit:
                    return found
    return found
