"""``mediaflow devices [--json]``: the cameras and microphones this machine offers;
``mediaflow devices --probe SPEC``: what one source offers and what a flow does with it.

Wire it into the main parser with :func:`add_parser` and dispatch to :func:`run`.
The listing comes from ``connectors.describe_devices``, the probe from
``devices.probe_source``, both imported inside :func:`run`: mediaflow never imports
``devices`` or ``connectors`` at module level (DESIGN.md), and a command that does not
list devices should not pay for PyAV and PortAudio.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from mediaflow.cli.args import seconds

COMMAND = "devices"
LISTEN_S = 5.0
PLANS = {
    "copy": "copied as it is",
    "h264": "decoded and encoded to H.264",
    "aac": "encoded to AAC once",
}


def add_parser(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    """Add the ``devices`` command to ``subparsers`` (``add_subparsers()``'s result)."""
    parser = subparsers.add_parser(
        COMMAND,
        help="list cameras and microphones, or probe one source (--probe)",
        description="List the cameras and microphones a flow can open, with the spec "
        "to write as `device` and what each offers; or, with --probe, say what one "
        "camera, URL, file or virtual source offers and what a flow does with it.",
        parents=list(parents),
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the full description as JSON (the same data as GET /api/devices); "
        "with --probe, what the probe found",
    )
    parser.add_argument(
        "--probe",
        metavar="SPEC",
        help="probe one source (/dev/video0, rtsp://..., a file, lavfi:...): streams, "
        "codecs, size, rate, keyframe interval, bitrate; exit 2 if it cannot be opened",
    )
    parser.add_argument(
        "--listen",
        type=seconds,
        metavar="SECONDS",
        help=f"with --probe: listen at most this long for keyframes (default {LISTEN_S:g})",
    )
    parser.add_argument(
        "--transport",
        choices=("tcp", "udp"),
        help="with --probe: RTSP over TCP (the default) or UDP",
    )
    parser.add_argument(
        "--timeout",
        type=seconds,
        metavar="SECONDS",
        help="with --probe: wait for a network source at most this long per step "
        "(default 10, as a flow's url source)",
    )


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Print the listing; returns the exit code (0, or 1 when nothing could be listed
    because both listings failed, 2 when a probe's option comes without ``--probe``).
    Blocks while devices are queried. With ``--probe``, see :func:`run_probe`."""
    stream = out if out is not None else sys.stdout
    if getattr(args, "probe", None) is not None:
        return run_probe(args, stream)
    given = [f"--{n}" for n in ("listen", "transport", "timeout") if getattr(args, n, None)]
    if given:
        verb = "goes" if len(given) == 1 else "go"
        print(f"mediaflow: {' and '.join(given)} {verb} with --probe only", file=sys.stderr)
        return 2
    from connectors import describe_devices

    described = describe_devices()
    if getattr(args, "json", False):
        json.dump(described, stream, indent=2)
        stream.write("\n")
    else:
        stream.write(render(described))
    return 1 if len(described.get("errors", [])) >= 2 else 0


def run_probe(args: argparse.Namespace, out: TextIO) -> int:
    """Probe ``args.probe`` and print what it offers (text, or ``--json``); returns 0, or
    2 with one line on stderr when it cannot be opened. Blocks up to about ``--listen``
    plus ``--timeout`` per network step."""
    from devices import DeviceError, probe_source

    timeout = {"timeout_s": args.timeout} if args.timeout else {}
    try:
        found = probe_source(
            args.probe, listen_s=args.listen or LISTEN_S, transport=args.transport, **timeout
        )
    except (DeviceError, ValueError) as exc:  # their messages never hold a password
        print(f"mediaflow: {exc}", file=sys.stderr)
        return 2
    if getattr(args, "json", False):
        json.dump(found.to_json(), out, indent=2)
        out.write("\n")
    else:
        out.write(render_probe(found.to_json()))
    return 0


def render_probe(probe: Mapping[str, Any]) -> str:
    """The readable form of ``SourceProbe.to_json()``: the source, then a line a stream."""
    lines = [probe["source"]]
    lines += ["  video  " + "  ".join(_video_words(v)) for v in probe["video"]]
    lines += ["  audio  " + "  ".join(_audio_words(a)) for a in probe["audio"]]
    if probe.get("read_error"):
        lines.append(f"  reading stopped early: {probe['read_error']}")
    return "\n".join(lines) + "\n"


def _video_words(video: Mapping[str, Any]) -> list[str]:
    codec = video["codec"] + (f" ({video['profile']})" if video["profile"] else "")
    fps = video["fps"]
    rate = f"{_number(fps)} fps" + (" (measured)" if video["fps_measured"] else "")
    seconds, frames = video["keyframe_interval_s"], video["keyframe_interval_frames"]
    if frames == 1:
        keyframes = "every frame a keyframe"
    elif seconds is not None:
        keyframes = f"keyframe every {seconds:.2f} s" + (f" ({frames} frames)" if frames else "")
    elif video["keyframe_at_least_s"] is not None:
        keyframes = f"keyframes more than {video['keyframe_at_least_s']:.2f} s apart"
    else:
        keyframes = "keyframe interval unknown"
    words = [codec, f"{video['width']}x{video['height']}", rate if fps else "rate unknown"]
    return [*words, keyframes, *_bitrate(video["bitrate"]), f"-> {PLANS[video['plan']]}"]


def _audio_words(audio: Mapping[str, Any]) -> list[str]:
    heard = f"{audio['sample_rate']} Hz {audio['layout'] or str(audio['channels']) + ' ch'}"
    return [audio["codec"], heard, *_bitrate(audio["bitrate"]), f"-> {PLANS[audio['plan']]}"]


def _bitrate(bits_per_s: int | None) -> list[str]:
    if not bits_per_s:
        return []
    if bits_per_s >= 1_000_000:
        return [f"~{bits_per_s / 1e6:.1f} Mbit/s"]
    return [f"~{bits_per_s / 1e3:.0f} kbit/s"]


def _number(value: float) -> str:
    """``30``, ``29.97``, ``12.5``: at most two decimals, none trailing."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


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
    """``python -m mediaflow.cli.devices [--json] [--probe SPEC ...]``."""
    parser = argparse.ArgumentParser(prog="mediaflow")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([COMMAND, *(sys.argv[1:] if argv is None else argv)])
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
