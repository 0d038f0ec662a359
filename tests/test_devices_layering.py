"""``devices`` sits below ``mediaflow``: it imports nothing of it (DESIGN.md, Layout)."""

from __future__ import annotations

import subprocess
import sys

from devices.audio_chunks import CHANNEL_LAYOUTS as DEVICE_LAYOUTS
from mediaflow.media import CHANNEL_LAYOUTS


def test_devices_and_all_their_modules_load_without_mediaflow() -> None:
    script = (
        "import pkgutil, importlib, sys\n"
        "import devices\n"
        "for module in pkgutil.iter_modules(devices.__path__):\n"
        "    importlib.import_module(f'devices.{module.name}')\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'mediaflow'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_the_microphone_and_the_speech_node_name_channel_layouts_alike() -> None:
    assert dict(DEVICE_LAYOUTS) == dict(CHANNEL_LAYOUTS)
