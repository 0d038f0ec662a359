"""``devices`` sits below ``mediaflow``: it imports nothing of it (DESIGN.md, Layout)."""

from __future__ import annotations

import subprocess
import sys

import av
import pytest

from devices.audio_chunks import MAX_CHANNELS, channel_layout


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


def test_the_microphone_names_ffmpegs_own_layout_for_each_channel_count() -> None:
    # The speech node names a chunk's layout the same way ("Nc"), so no table of
    # layouts is kept on either side of the layering.
    named = {n: av.AudioLayout(channel_layout(n)) for n in range(1, MAX_CHANNELS + 1)}
    assert {n: layout.nb_channels for n, layout in named.items()} == {
        n: n for n in range(1, MAX_CHANNELS + 1)
    }
    assert (named[1].name, named[2].name) == ("mono", "stereo")
    for bad in (0, MAX_CHANNELS + 1):
        with pytest.raises(ValueError, match="channels must be 1-8"):
            channel_layout(bad)
