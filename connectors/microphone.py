"""``connector = "microphone"``: a microphone (or an audio file, or a tone) as WAV chunks.

Port ``audio``: one ``audio/wav`` chunk of exactly ``chunk_ms`` at ``rate`` Hz and
``channels`` channels, resampled by the device layer. ``device`` is ``"default"``, a
PortAudio index or name, ``file:speech.wav`` (relative to the flow file) or
``lavfi:sine=frequency=440:sample_rate=16000``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from connectors._audio import AudioRequest
from connectors._connector import AUDIO_PORTS, MediaConnector
from connectors._reconnect import Reconnect


class MicrophoneConnector(MediaConnector):
    """Emits audio chunks on ``audio`` (see the module doc).

    Options: ``device`` ("default"), ``rate`` (16000), ``channels`` (1), ``chunk_ms``
    (100), ``realtime`` (files and lavfi: false = as fast as possible), ``loop`` (a
    file starts again when it ends, for demos),
    ``reconnect_base_s``/``reconnect_max_s`` (backoff after an unplug).
    """

    outputs: ClassVar[Mapping[str, str]] = AUDIO_PORTS

    def __init__(
        self,
        device: str = "default",
        rate: int = 16000,
        channels: int = 1,
        chunk_ms: int = 100,
        realtime: bool | None = None,
        reconnect_max_s: float = 10.0,
        reconnect_base_s: float = 0.5,
        loop: bool = False,
    ) -> None:
        """Opens nothing (``setup`` does; bad rates and channels fail there)."""
        super().__init__(
            str(device),
            audio=AudioRequest(str(device), rate, channels, chunk_ms, realtime),
            reconnect=Reconnect(reconnect_base_s, reconnect_max_s, loop=bool(loop)),
        )
