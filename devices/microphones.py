"""Find the microphones on this machine, through sounddevice (PortAudio).

``sounddevice`` is imported lazily, inside :func:`load_sounddevice`: importing it fails
on a machine without the PortAudio shared library, and everything that does not
capture sound must still work there. PortAudio enumerates devices once, when it is
initialised; ``rescan=True`` re-initialises it to see devices plugged in since (only
safe while no stream is open).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from devices.errors import AmbiguousDevice, DeviceNotFound, PortAudioMissing


@dataclass(frozen=True)
class MicrophoneInfo:
    """One PortAudio device with input channels."""

    index: int
    name: str
    host_api: str
    max_input_channels: int
    default_samplerate: float
    is_default: bool

    @property
    def label(self) -> str:
        """``"3: USB Mic (ALSA, 2 ch)"`` for messages and listings."""
        return f"{self.index}: {self.name} ({self.host_api}, {self.max_input_channels} ch)"


def load_sounddevice() -> Any:
    """Import and return the ``sounddevice`` module.

    Blocks on first call while PortAudio initialises (device scan). Raises
    :class:`PortAudioMissing` when the PortAudio library or the module is absent.
    """
    try:
        return importlib.import_module("sounddevice")
    except OSError as exc:  # sounddevice raises OSError when libportaudio is absent
        raise PortAudioMissing(str(exc)) from exc
    except ImportError as exc:
        raise PortAudioMissing(f"the sounddevice module is not importable: {exc}") from exc


def rescan_portaudio(sd: Any) -> None:
    """Re-initialise PortAudio so it enumerates devices again. Blocks briefly.

    PortAudio has no hot-plug notification; it lists devices at ``Pa_Initialize``.
    Never call it while a stream is open.
    """
    sd._terminate()
    sd._initialize()


def list_microphones(*, rescan: bool = False) -> list[MicrophoneInfo]:
    """List PortAudio devices that have input channels, in PortAudio's order.

    Blocks briefly (PortAudio queries). Raises :class:`PortAudioMissing`.
    """
    sd = load_sounddevice()
    if rescan:
        rescan_portaudio(sd)
    host_apis = [str(api["name"]) for api in sd.query_hostapis()]
    default_index = _default_input_index(sd)
    microphones = []
    for index, device in enumerate(sd.query_devices()):
        channels = int(device["max_input_channels"])
        if channels <= 0:
            continue
        api = int(device["hostapi"])
        microphones.append(
            MicrophoneInfo(
                index=index,
                name=str(device["name"]),
                host_api=host_apis[api] if 0 <= api < len(host_apis) else str(api),
                max_input_channels=channels,
                default_samplerate=float(device["default_samplerate"]),
                is_default=index == default_index,
            )
        )
    return microphones


def _default_input_index(sd: Any) -> int | None:
    try:
        default = sd.query_devices(kind="input")
    except sd.PortAudioError:
        return None  # PortAudio reports no default input device
    index = default.get("index")
    return int(index) if index is not None else None


def resolve_microphone(spec: str | int, microphones: Sequence[MicrophoneInfo]) -> MicrophoneInfo:
    """Pick the device a spec names: ``"default"``, an index, or a name. Pure.

    A name matches exactly (case-insensitive) first, else as a substring. Raises
    :class:`DeviceNotFound` (listing the microphones) or :class:`AmbiguousDevice`
    (listing the matches).
    """
    available = [m.label for m in microphones]
    text = str(spec).strip()
    if text.lower() == "default":
        for mic in microphones:
            if mic.is_default:
                return mic
        raise DeviceNotFound(text, available, reason="no default input device")
    if text.isdigit():
        for mic in microphones:
            if mic.index == int(text):
                return mic
        raise DeviceNotFound(text, available, reason="no input device with that index")
    exact = [m for m in microphones if m.name.lower() == text.lower()]
    if len(exact) == 1:
        return exact[0]
    matches = exact or [m for m in microphones if text.lower() in m.name.lower()]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise AmbiguousDevice(text, [m.label for m in matches])
    raise DeviceNotFound(text, available)
