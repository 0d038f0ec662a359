"""Everything this machine offers, as JSON-ready data (``mediaflow devices``, ``/api/devices``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from devices.camera_modes import CameraFormat
from devices.cameras import CameraInfo, list_cameras
from devices.errors import DeviceError
from devices.microphones import MicrophoneInfo, list_microphones


def camera_to_json(camera: CameraInfo) -> dict[str, Any]:
    """A camera as plain dicts and lists, formats with their FFmpeg ``input_format``."""
    data = asdict(camera)
    data["by_id"] = list(camera.by_id)
    data["stable_spec"] = camera.stable_spec
    data["formats"] = [format_to_json(f) for f in camera.formats]
    return data


def format_to_json(fmt: CameraFormat) -> dict[str, Any]:
    """``{"fourcc", "input_format", "description", "compressed", "sizes", "size_range"}``."""
    return {
        "fourcc": fmt.fourcc,
        "input_format": fmt.input_format,
        "description": fmt.description,
        "compressed": fmt.compressed,
        "sizes": [
            {
                "width": s.width,
                "height": s.height,
                "fps": list(s.fps),
                "fps_range": list(s.fps_range) if s.fps_range else None,
            }
            for s in fmt.sizes
        ],
        "size_range": asdict(fmt.size_range) if fmt.size_range else None,
    }


def microphone_to_json(mic: MicrophoneInfo) -> dict[str, Any]:
    """A microphone as a plain dict, with the ``spec`` that opens it."""
    data = asdict(mic)
    data["spec"] = str(mic.index)
    return data


def describe_devices(
    *,
    cameras: Callable[[], list[CameraInfo]] = list_cameras,
    microphones: Callable[[], list[MicrophoneInfo]] = list_microphones,
) -> dict[str, Any]:
    """``{"cameras": [...], "microphones": [...], "errors": [...]}``.

    Blocks while devices are queried (file system, ioctls, PortAudio). A listing that
    fails (PortAudio missing, sysfs unreadable) becomes an entry in ``errors``
    (``{"source", "type", "message"}``) instead of an exception; the other listing is
    still returned.
    """
    result: dict[str, Any] = {"cameras": [], "microphones": [], "errors": []}
    try:
        result["cameras"] = [camera_to_json(c) for c in cameras()]
    except (DeviceError, OSError) as exc:
        result["errors"].append(_error("cameras", exc))
    try:
        result["microphones"] = [microphone_to_json(m) for m in microphones()]
    except (DeviceError, OSError) as exc:
        result["errors"].append(_error("microphones", exc))
    return result


def _error(source: str, exc: BaseException) -> dict[str, str]:
    return {"source": source, "type": type(exc).__name__, "message": str(exc)}
