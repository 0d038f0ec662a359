"""``mediaflow devices [--json]``: the cameras and microphones this machine offers.

Wire it into the main parser with :func:`add_parser` and dispatch to :func:`run`.
The listing comes from ``connectors.describe_devices``, imported inside :func:`run`:
mediaflow never imports ``devices`` or ``connectors`` at module level (DESIGN.md), and
a command that does not list devices should not pay for PyAV and PortAudio.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

COMMAND = "devices"


def add_parser(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    """Add the ``devices`` command to ``subparsers`` (``add_subparsers()``'s result)."""
    parser = subparsers.add_parser(
        COMMAND,
        help="list cameras and microphones",
        description="List the cameras and microphones a flow can open, with the spec "
        "to write as `device` and what each offers.",
        parents=list(parents),
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the full description as JSON (the same data as GET /api/devices)",
    )


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Print the listing; returns the exit code (0, or 1 when nothing could be listed
    because both listings failed). Blocks while devices are queried."""
    from connectors import describe_devices

    stream = out if out is not None else sys.stdout
    described = describe_devices()
    if getattr(args, "json", False):
        json.dump(described, stream, indent=2)
        stream.write("\n")
    else:
        stream.write(render(described))
    return 1 if len(described.get("errors", [])) >= 2 else 0


def render(described: Mapping[str, Any]) -> str:
    """The readable form of ``describe_devices()``: two tables, then any errors."""
    camera_rows = [
        (c["stable_spec"], c["name"], c["backend"], _modes(c["formats"]) or c.get("error") or "")
        for c in described.get("cameras", [])
    ]
    mic_rows = [
        (
            m["spec"] + (" *" if m["is_default"] else ""),
            m["name"],
            m["host_api"],
            str(m["max_input_channels"]),
            f"{m['default_samplerate']:g}",
        )
        for m in described.get("microphones", [])
    ]
    parts = ["Cameras (device = ...):\n"]
    parts.append(_table(("device", "name", "backend", "modes"), camera_rows) or "  none found\n")
    parts.append("\nMicrophones (device = ..., * = default):\n")
    parts.append(
        _table(("device", "name", "host api", "channels", "rate"), mic_rows) or "  none found\n"
    )
    for error in described.get("errors", []):
        parts.append(f"\n{error['source']}: {error['type']}: {error['message']}\n")
    return "".join(parts)


def _modes(formats: Sequence[Mapping[str, Any]]) -> str:
    """``mjpeg 1280x720@30,640x480@30; yuyv422 ...``: what a camera offers, briefly."""
    out = []
    for fmt in formats:
        sizes = ",".join(
            f"{s['width']}x{s['height']}@{max(s['fps'], default=0):g}" for s in fmt["sizes"]
        )
        out.append(f"{fmt['input_format'] or fmt['fourcc']} {sizes}".strip())
    return "; ".join(out)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    if not rows:
        return ""
    widths = [max(len(str(r[i])) for r in (headers, *rows)) for i in range(len(headers))]
    lines = ["  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in (headers, *rows)]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mediaflow.cli_devices [--json]`` until the main CLI dispatches here."""
    parser = argparse.ArgumentParser(prog="mediaflow")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([COMMAND, *(sys.argv[1:] if argv is None else argv)])
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
