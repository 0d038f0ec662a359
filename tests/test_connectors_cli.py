"""``mediaflow devices``: the listing as JSON in a subprocess, and as a table."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys

from mediaflow.cli import devices as cli_devices
from tests.pulse import PulseServer
from tests.pulse import pulse_server as pulse_server_fixture  # noqa: F401


def test_devices_json_lists_the_pulse_microphones(pulse_server: PulseServer) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mediaflow.cli.devices", "--json"],
        env=pulse_server.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    listing = json.loads(done.stdout)
    assert {"cameras", "microphones", "errors"} <= set(listing)
    names = {mic["name"] for mic in listing["microphones"]}
    assert "default" in names, listing
    assert listing["errors"] == []


def test_devices_table_reads_like_a_table() -> None:
    described = {
        "cameras": [
            {
                "stable_spec": "/dev/v4l/by-id/usb-046d_C270-video-index0",
                "name": "HD Webcam C270",
                "backend": "v4l2",
                "error": None,
                "formats": [
                    {
                        "fourcc": "MJPG",
                        "input_format": "mjpeg",
                        "sizes": [
                            {"width": 1280, "height": 720, "fps": [30.0, 15.0]},
                            {"width": 640, "height": 480, "fps": [30.0]},
                        ],
                    }
                ],
            }
        ],
        "microphones": [
            {
                "spec": "3",
                "name": "default",
                "host_api": "ALSA",
                "max_input_channels": 32,
                "default_samplerate": 44100.0,
                "is_default": True,
            },
        ],
        "errors": [],
    }
    text = cli_devices.render(described)
    assert "/dev/v4l/by-id/usb-046d_C270-video-index0  HD Webcam C270" in text
    assert "mjpeg 1280x720@30,640x480@30" in text
    assert "3 *     default  ALSA" in text


def test_devices_parser_and_run() -> None:
    parser = argparse.ArgumentParser(prog="mediaflow")
    cli_devices.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["devices", "--json"])
    out = io.StringIO()
    assert cli_devices.run(args, out) == 0
    assert set(json.loads(out.getvalue())) == {"cameras", "microphones", "errors"}
