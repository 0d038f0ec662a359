"""The MQTT and webhook sinks against their own clients driven bare, and through
outages.

Run from the repository root::

    python -m bench.sinks                 # throughput, 3 runs (about 2 minutes)
    python -m bench.sinks --outage        # outages, 3 runs (about 12 minutes)
    python -m bench.sinks --json

**Throughput** (:mod:`bench.sinks.measure`, :mod:`bench.sinks.throughput`): a fresh
``mosquitto`` per run on a free loopback port; a source emitting ``--n`` motion-like
events into ``use = "mqtt"`` (QoS 1) in a ``FlowSession``, against bare ``aiomqtt``
publishing the same payloads at QoS 1 from one task awaiting each publish (one in
flight, in order: the sink's guarantee) and, for reference, ``--inflight`` at a
time. Then the webhook receiver (:mod:`bench.sinks.receiver`, a process of its own,
checking every signature) and ``--webhook-n`` items into ``use = "webhook"``
against a bare ``aiohttp`` client POSTing bodies of the same shape one after the
other. Each measurement is a child process; runs alternate which goes first.
Target: the mqtt sink at >= 50 % of the bare client's events/s, with margin.

**Outages** (``--outage``, :mod:`bench.sinks.outage`): a flow run by ``mediaflow
run`` (its own process, so its RSS is the flow's), events at ``--rate`` a second;
the broker stopped for ``--outage-s`` mid-stream, then started: every event must
arrive once or marked (``redelivery`` or the MQTT DUP flag), in order, none
dead-lettered, and the flow's RSS is read against the same flow's over as long a
window with the broker up. Then the receiver answers 500 for
``--receiver-outage-s``, then 200: every item must arrive, in order, each signature
verifying.

Progress goes to stderr, the tables (or ``--json``) to stdout; exit status 0 when
every check passed (and, for throughput, the target was met).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench._lib.common import emit_result, run_async
from bench.sinks.figures import outage_figures
from bench.sinks.judge import target_met
from bench.sinks.measure import throughput
from bench.sinks.outage import OutageConfig, broker_outage, broker_steady, receiver_outage
from bench.sinks.report import BROKER, RECEIVER, THROUGHPUT, table
from bench.sinks.throughput import CHILDREN


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    doc = __doc__ or ""
    p = argparse.ArgumentParser(prog="python -m bench.sinks", description=doc.split("\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--n", type=int, default=20000, help="events a throughput run (mqtt)")
    p.add_argument("--webhook-n", type=int, default=5000, help="items a throughput run")
    p.add_argument("--inflight", type=int, default=16, help="the bare client's window")
    p.add_argument("--outage", action="store_true", help="the outage runs instead")
    p.add_argument("--outage-s", type=float, default=60.0, help="the broker stopped")
    p.add_argument("--receiver-outage-s", type=float, default=30.0, help="answers 500")
    p.add_argument("--rate", type=float, default=20.0, help="events a second (outages)")
    p.add_argument("--warmup-s", type=float, default=5.0)
    p.add_argument("--live-s", type=float, default=10.0)
    p.add_argument("--post-s", type=float, default=10.0)
    p.add_argument("--dir", type=Path, help="work directory (default: a fresh temp one)")
    p.add_argument("--json", action="store_true", help="JSON on stdout instead of tables")
    p.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    p.add_argument("--child-args", default="{}", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.runs < 1 or args.n < 1 or args.outage_s <= 0 or args.receiver_outage_s <= 0:
        p.error("--runs, --n, --outage-s and --receiver-outage-s must be above 0")
    return args


async def outages(config: OutageConfig, workdir: Path, runs: int) -> list[dict[str, Any]]:
    """Each run: the broker's outage and its steady peer (alternating which goes
    first), then the receiver's."""
    done = []
    for index in range(1, runs + 1):
        place = workdir / f"outage{index}"
        say(f"-- outage run {index} of {runs}")
        steady = await broker_steady(config, place) if index % 2 == 0 else None
        broker = await broker_outage(config, place)
        if steady is None:
            steady = await broker_steady(config, place)
        hook = await receiver_outage(config, place)
        mqtt_figs, hook_figs = outage_figures(broker, steady), outage_figures(hook, None)
        say(f"   broker: all arrived {mqtt_figs.get('all_arrived')}, RSS growth "
            f"{mqtt_figs.get('rss_growth_mib')} (broker up: "
            f"{mqtt_figs.get('rss_steady_growth_mib')}) MiB; receiver: all arrived "
            f"{hook_figs.get('all_arrived')}")  # fmt: skip
        done.append({"broker": mqtt_figs, "receiver": hook_figs})
    return done


def _outage_ok(run: dict[str, Any]) -> bool:
    return all(
        part.get("all_arrived") and part.get("dead_letters") == 0 and part["exit_status"] == 0
        for part in (run["broker"], run["receiver"])
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        emit_result(run_async(CHILDREN[args.child](json.loads(args.child_args))))
        return 0
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="mediaflow-sinks-"))
    say(f"work directory {workdir}")
    if args.outage:
        config = OutageConfig(
            outage_s=args.outage_s, receiver_outage_s=args.receiver_outage_s, rate=args.rate,
            warmup_s=args.warmup_s, live_s=args.live_s, post_s=args.post_s,
        )  # fmt: skip
        runs = run_async(outages(config, workdir, args.runs))
        ok = all(_outage_ok(run) for run in runs)
        if args.json:
            print(json.dumps({"config": config.__dict__, "ok": ok, "runs": runs}, indent=1))
        else:
            print(f"mqtt sink through a {args.outage_s:g} s broker outage, "
                  f"{args.rate:g} events/s; {args.runs} run(s)\n")  # fmt: skip
            print("\n".join(table(BROKER, [run["broker"] for run in runs], checks=True)))
            print(f"\nwebhook sink through {args.receiver_outage_s:g} s of 500s\n")
            print("\n".join(table(RECEIVER, [run["receiver"] for run in runs], checks=True)))
            print(f"\nevery check passed: {'yes' if ok else 'NO'}")
        return 0 if ok else 1
    measured = throughput(workdir, args.runs, args.n, args.webhook_n, args.inflight)
    said = target_met([run["mqtt"]["ratio"] for run in measured])
    if args.json:
        print(json.dumps({"verdict": said, "runs": measured}, indent=1))
    else:
        print(f"sinks against their bare clients: {args.n} events (mqtt), "
              f"{args.webhook_n} items (webhook); {args.runs} run(s)\n")  # fmt: skip
        print("\n".join(table(THROUGHPUT, measured)))
        print(f"\nmqtt target: {said}")
    return 0 if said.startswith("MET") else 1
