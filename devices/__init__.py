"""Hardware-facing code: enumerate and open cameras and microphones, real and virtual.

Enumeration (:func:`list_cameras`, :func:`list_microphones`, :func:`describe_devices`)
and opening (:func:`open_video`, :func:`open_microphone`) share one shape: a blocking
open, then a producer thread per source that hands frames or chunks to asyncio through
a bounded :class:`FrameBridge` with a named overflow policy (live devices drop the
oldest, files and virtual sources block). Outcomes stay distinct: items,
:class:`EndOfStream` (a finite source is done), :class:`DeviceLost` (a live one went
away: back off with :func:`backoff_delays` and reopen), configuration errors that list
what is available. A source whose video is H.264 or H.265 can be opened as a
:class:`PacketInput` instead (``open_video(copy_codecs=...)``): its packets as encoded,
sound included, never decoded (:mod:`devices.codecs` says which are kept).
:func:`probe_source` says what one source offers, without decoding. A URL's password
stays in the URL: messages and names use :func:`devices.redact.public_url`.
Network streams, video and sound alike, open with :func:`url_options` and
:func:`url_timeout` (:data:`NETWORK_TIMEOUT_S` by default), so a silent server fails
instead of hanging a thread. ``sounddevice`` (PortAudio) is imported only when
sound is touched. Nothing here imports ``mediaflow``: devices sit below it.
"""

from devices.audio_chunks import AudioChunk, encode_wav
from devices.audio_input import AudioInfo, AudioInput, AudioStatistics, open_microphone
from devices.backoff import backoff_delays
from devices.bridge import BridgeStatistics, FrameBridge, Policy
from devices.camera_modes import CameraFormat, FrameSize, SizeRange
from devices.cameras import CameraInfo, list_cameras
from devices.describe import describe_devices
from devices.errors import (
    AmbiguousDevice,
    BridgeClosed,
    BridgeOverflow,
    CredentialsRefused,
    DeviceError,
    DeviceLost,
    DeviceNotFound,
    EndOfStream,
    PortAudioMissing,
    UnsupportedMode,
)
from devices.microphones import MicrophoneInfo, list_microphones
from devices.packet_input import CapturedPacket, PacketInput, StreamTemplates
from devices.probe import SourceProbe, probe_source
from devices.video_info import VideoInfo
from devices.video_input import CapturedFrame, VideoInput, VideoStatistics, open_video
from devices.video_spec import NETWORK_TIMEOUT_S, url_options, url_timeout

__all__ = [
    "NETWORK_TIMEOUT_S",
    "AmbiguousDevice",
    "AudioChunk",
    "AudioInfo",
    "AudioInput",
    "AudioStatistics",
    "BridgeClosed",
    "BridgeOverflow",
    "BridgeStatistics",
    "CameraFormat",
    "CameraInfo",
    "CapturedFrame",
    "CapturedPacket",
    "CredentialsRefused",
    "DeviceError",
    "DeviceLost",
    "DeviceNotFound",
    "EndOfStream",
    "FrameBridge",
    "FrameSize",
    "MicrophoneInfo",
    "PacketInput",
    "Policy",
    "PortAudioMissing",
    "SizeRange",
    "SourceProbe",
    "StreamTemplates",
    "UnsupportedMode",
    "VideoInfo",
    "VideoInput",
    "VideoStatistics",
    "backoff_delays",
    "describe_devices",
    "encode_wav",
    "list_cameras",
    "list_microphones",
    "open_microphone",
    "open_video",
    "probe_source",
    "url_options",
    "url_timeout",
]
