"""``mediaflow flows``: operate the flows of a running server from the command line.

::

    mediaflow flows [list]                      flows, their status and backlog
    mediaflow flows pause|resume|disable|enable FLOW
    mediaflow flows step FLOW [--wait S]        run the oldest waiting item of a paused flow
    mediaflow flows dead-letters FLOW [--limit N]
    mediaflow flows requeue FLOW ID             run a dead letter again (as a redelivery)
    mediaflow flows discard FLOW ID             delete a dead letter

It talks HTTP to ``mediaflow run FLOW --port N`` (flow control needs the process
that runs the flow) or ``mediaflow serve`` (listing and dead letters):
``--url`` (default ``$MEDIAFLOW_URL``, else ``http://127.0.0.1:$MEDIAFLOW_PORT``,
port 8765), with ``Authorization: Bearer $MEDIAFLOW_TOKEN`` when that is set.
Tables by default, the server's JSON with ``--json``. The standard library's
HTTP client (urllib, no proxies) keeps the command free of an event loop.

Exit codes: 0 done, 1 the server could not be reached or refused (401, 404,
409, 5xx), 2 a usage error (a bad URL, or a request the server calls malformed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO
from urllib.parse import quote, urlsplit

from mediaflow.cli.args import seconds

COMMAND = "flows"
DEFAULT_PORT = 8765  # mediaflow.server.settings.DEFAULT_PORT (not imported: no aiohttp here)
TIMEOUT_S = 10.0
REASON_WIDTH = 60
CONTROL_ACTIONS = ("pause", "resume", "step", "disable", "enable")


class FlowsError(Exception):
    """A one-line failure to report as ``mediaflow: ...``, with the exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any  # the JSON answer; None for an empty body (204)


def default_url() -> str:
    explicit = os.environ.get("MEDIAFLOW_URL")
    if explicit:
        return explicit
    port = os.environ.get("MEDIAFLOW_PORT", "")
    return f"http://127.0.0.1:{port if port.isdigit() else DEFAULT_PORT}"


def request(
    base: str, method: str, path: str, *, token: str | None, timeout: float = TIMEOUT_S
) -> Answer:
    """One request to the server; a 2xx answer, or :class:`FlowsError` saying why not."""
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(base + path, method=method, headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except urllib.error.URLError as exc:
        reason = getattr(exc.reason, "strerror", None) or str(exc.reason)
        raise FlowsError(
            f"cannot reach the server at {base}: {reason} (is `mediaflow run FLOW --port N` "
            "or `mediaflow serve` running there? set --url or MEDIAFLOW_URL)"
        ) from None
    except TimeoutError:
        raise FlowsError(f"the server at {base} did not answer within {timeout:g} s") from None
    except OSError as exc:  # a reset connection, say
        raise FlowsError(f"cannot talk to the server at {base}: {exc}") from None
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        raise FlowsError(f"{method} {path}: the server answered {status} without JSON") from None
    if 200 <= status < 300:
        return Answer(status, body)
    if status == 401:
        needs = "refused the token in MEDIAFLOW_TOKEN" if token else "needs a token"
        raise FlowsError(f"the server at {base} {needs} (401): set MEDIAFLOW_TOKEN to its token")
    message = body.get("error") if isinstance(body, Mapping) else None
    raise FlowsError(
        f"{message or f'{method} {path} failed'} ({status})", 2 if status == 400 else 1
    )


# -- the parser -----------------------------------------------------------------------


def _add_common(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "--url",
        default=default,
        help="the server (default: $MEDIAFLOW_URL or http://127.0.0.1:$MEDIAFLOW_PORT, 8765)",
    )
    parser.add_argument(
        "--json", action="store_true", default=default, help="print the server's JSON answer"
    )
    parser.add_argument(
        "--timeout", type=seconds, default=default, metavar="S", help="seconds to wait (10)"
    )


def add_parser(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    """Add the ``flows`` command to ``subparsers`` (``add_subparsers()``'s result)."""
    parser = subparsers.add_parser(
        COMMAND,
        help="pause, step, disable and inspect the flows of a running server",
        description="Operate the flows of a running server: list them, pause, resume, "
        "step, disable and enable a flow its `mediaflow run --port N` runs, and list, "
        "requeue or discard dead letters. The token comes from MEDIAFLOW_TOKEN.",
        parents=list(parents),
    )
    _add_common(parser, None)
    # The same options after the action (`flows pause x --json`), without resetting them.
    common = argparse.ArgumentParser(add_help=False)
    _add_common(common, argparse.SUPPRESS)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser(
        "list", help="flows, their status and backlog (the default)", parents=[common]
    )
    helps = {
        "pause": "start nothing more of FLOW (sources keep running, work waits)",
        "resume": "run a paused FLOW again",
        "step": "run exactly one waiting item of a paused FLOW, the oldest, and say which",
        "disable": "end FLOW's sources and run nothing of it; its work is kept",
        "enable": "undo disable: sources resume where they were",
    }
    for action in CONTROL_ACTIONS:
        sub = actions.add_parser(action, help=helps[action], parents=[common])
        sub.add_argument("flow", metavar="FLOW", help="the flow's name")
        if action == "step":
            sub.add_argument(
                "--wait", type=seconds, default=2.0, metavar="S",
                help="how long to wait for an item to start (default 2)",
            )  # fmt: skip
    dead = actions.add_parser("dead-letters", help="FLOW's dead letters, newest first",
                              parents=[common])  # fmt: skip
    dead.add_argument("flow", metavar="FLOW", help="the flow's name")
    dead.add_argument("--limit", type=int, default=50, metavar="N", help="at most N (50)")
    for action, text in (
        ("requeue", "run dead letter ID again, as a redelivery"),
        ("discard", "delete dead letter ID"),
    ):
        sub = actions.add_parser(action, help=text, parents=[common])
        sub.add_argument("flow", metavar="FLOW", help="the flow's name")
        sub.add_argument("id", metavar="ID", help="the dead letter's id (from `dead-letters`)")


# -- running it --------------------------------------------------------------------------


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Do the action; returns the exit code. Blocks for one HTTP request (a step
    waits up to ``--wait`` seconds for its item)."""
    stream = out if out is not None else sys.stdout
    base = (args.url or default_url()).rstrip("/")
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        print(f"mediaflow: --url {base!r} is not an http:// or https:// URL", file=sys.stderr)
        return 2
    try:
        body = _call(args, base, os.environ.get("MEDIAFLOW_TOKEN") or None)
    except FlowsError as exc:
        print(f"mediaflow: {exc}", file=sys.stderr)
        return exc.code
    if args.json:
        json.dump(body, stream, indent=2)
        stream.write("\n")
    else:
        stream.write(render(args.action or "list", body, base))
    return 0


def _call(args: argparse.Namespace, base: str, token: str | None) -> Any:
    """The request ``args`` ask for; the server's answer (a made-up one for a 204)."""
    action = args.action or "list"
    timeout = args.timeout or TIMEOUT_S
    if action == "list":
        return request(base, "GET", "/api/flows", token=token, timeout=timeout).body
    flow = quote(args.flow, safe="")
    if action in CONTROL_ACTIONS:
        query = f"?wait_s={args.wait:g}" if action == "step" else ""
        timeout += args.wait if action == "step" else 0
        path = f"/api/flows/{flow}/{action}{query}"
        return request(base, "POST", path, token=token, timeout=timeout).body
    if action == "dead-letters":
        path = f"/api/flows/{flow}/dead-letters?limit={args.limit}"
        return request(base, "GET", path, token=token, timeout=timeout).body
    path = f"/api/flows/{flow}/dead-letters/{quote(args.id, safe='')}"
    if action == "requeue":
        return request(base, "POST", path + "/requeue", token=token, timeout=timeout).body
    request(base, "DELETE", path, token=token, timeout=timeout)
    return {"flow": args.flow, "id": args.id, "discarded": True}


def render(action: str, body: Any, base: str) -> str:
    """The readable form of the server's answer to ``action``."""
    if action == "list":
        rows = [_flow_row(flow) for flow in body.get("flows", [])]
        if not rows:
            return f"no flows on {base}\n"
        table = _table(("flow", "status", "nodes", "backlog", "last run"), rows)
        unavailable = body.get("queue") == "unavailable"
        return table + ("(the queue did not answer: backlog unknown)\n" if unavailable else "")
    if action == "dead-letters":
        rows = [_dead_row(dead) for dead in body.get("dead_letters", [])]
        if not rows:
            return f"{body.get('flow')}: no dead letters\n"
        return _table(("id", "node", "seq", "tries", "dead at", "reason"), rows)
    if action == "requeue":
        item = body["requeued"]
        return (
            f"{body['flow']}: requeued dead letter {body['id']}: {item['node']} seq "
            f"{item['seq']} runs again (delivery {item['deliveries'] + 1})\n"
        )
    if action == "discard":
        return f"{body['flow']}: discarded dead letter {body['id']}\n"
    line = f"{body['flow']}: {body['status']}" + ("" if body.get("changed") else " (unchanged)")
    if action == "step":
        stepped = body.get("stepped")
        if stepped is None:
            return f"{body['flow']}: nothing waited to run; {body['status']}\n"
        return (
            f"{body['flow']}: stepped {stepped['node']} seq {stepped['seq']} "
            f"(entry {stepped['entry_id']}, delivery {stepped['deliveries']}); "
            f"{body['status']}\n"
        )
    return line + "\n"


def _flow_row(flow: Mapping[str, Any]) -> tuple[str, ...]:
    run = flow.get("run") or {}
    last = str(run.get("run_id", ""))[:12]
    if run.get("outcome"):
        last += f" ({run['outcome']})"
    status = flow.get("status") or ("stored" if not flow.get("live") else "live")
    return (flow["name"], status, str(flow.get("nodes", "")), str(flow.get("backlog", "")),
            last or "-")  # fmt: skip


def _dead_row(dead: Mapping[str, Any]) -> tuple[str, ...]:
    reason = " ".join(str(dead.get("reason", "")).split())
    if len(reason) > REASON_WIDTH:
        reason = reason[: REASON_WIDTH - 1] + "…"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(dead["dead_at"])))
    return (str(dead["id"]), str(dead["node"]), str(dead["seq"]), str(dead["deliveries"]),
            when, reason)  # fmt: skip


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(r[i])) for r in (headers, *rows)) for i in range(len(headers))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in (headers, *rows)]  # fmt: skip
    return "\n".join(lines) + "\n"
