"""The throughput runs: per run a fresh broker and receiver, each measurement a child
(:mod:`bench.sinks.throughput`), the sink and its bare client alternating which goes
first. Blocks."""

from __future__ import annotations

import json
import shutil
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._lib.common import run_child
from bench.sinks.judge import arrival
from bench.sinks.outage import SECRET
from bench.sinks.procs import Broker, Receiver

Json = dict[str, Any]
Say = Callable[[str], None]
CHILD_S = 600.0


def _child(name: str, args: Json, env: dict[str, str] | None = None) -> Json:
    run = run_child("bench.sinks", name, args, hard_timeout_s=CHILD_S, env=env)
    if run.result is None or run.error:
        raise RuntimeError(f"{name} {args}: {run.error}\n{run.stderr[-3000:]}")
    return run.result


def _receiver(url: str, path: str, method: str = "GET") -> Json:
    request = urllib.request.Request(f"{url}{path}", method=method)
    with urllib.request.urlopen(request, timeout=30) as answer:
        body = answer.read()
    return json.loads(body) if path == "/report" else {}


def mqtt_run(place: Path, n: int, inflight: int, first_flow: bool, say: Say) -> Json:
    """One run's events/s: the sink, the bare client one in flight, and ``inflight``."""
    broker = Broker(place / "broker")
    broker.start()
    try:
        args = {"port": broker.port, "n": n}
        order = ["flow", "raw"] if first_flow else ["raw", "flow"]
        got: Json = {}
        for which in order:
            name = "mqtt_flow" if which == "flow" else "mqtt_raw"
            got[which] = _child(name, {**args, "inflight": 1})["rate"]
        if inflight > 1:
            got["raw_window"] = _child("mqtt_raw", {**args, "inflight": inflight})["rate"]
    finally:
        broker.stop()
        shutil.rmtree(place / "broker", ignore_errors=True)
    got["ratio"] = got["flow"] / got["raw"]
    say(f"   mqtt: sink {got['flow']:,.0f}/s, bare {got['raw']:,.0f}/s ({got['ratio']:.2f}x)")
    return got


def webhook_run(place: Path, n: int, first_flow: bool, say: Say) -> Json:
    """One run's items/s: the sink and the bare client, each checked at the receiver."""
    receiver = Receiver(place / "receiver", SECRET)
    try:
        got: Json = {}
        order = ["flow", "raw"] if first_flow else ["raw", "flow"]
        for which in order:
            if which == "flow":
                env = {"MEDIAFLOW_WEBHOOK_SECRET": SECRET}
                rate = _child("webhook_flow", {"url": receiver.hook, "n": n}, env)["rate"]
            else:
                rate = _child("webhook_raw", {"url": receiver.hook, "n": n, "secret": SECRET})
                rate = rate["rate"]
            report = _receiver(receiver.url, "/report")
            delivered = report["delivered"]
            judged = arrival(n, [(d[0], d[1]) for d in delivered], all(d[2] for d in delivered))
            if not judged.ok:
                raise RuntimeError(f"webhook {which}: not every item arrived signed: {judged}")
            _receiver(receiver.url, "/reset", "POST")
            got[which] = rate
    finally:
        receiver.stop()
    got["ratio"] = got["flow"] / got["raw"]
    say(f"   webhook: sink {got['flow']:,.0f}/s, bare {got['raw']:,.0f}/s ({got['ratio']:.2f}x)")
    return got


def throughput(workdir: Path, runs: int, n: int, webhook_n: int, inflight: int) -> list[Json]:
    done = []
    for index in range(1, runs + 1):
        print(f"-- throughput run {index} of {runs}", file=sys.stderr, flush=True)
        place = workdir / f"run{index}"
        first = index % 2 == 1
        mqtt = mqtt_run(place, n, inflight, first, _say)
        hook = webhook_run(place, webhook_n, first, _say)
        done.append({"mqtt": mqtt, "webhook": hook})
    return done


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
