"""Flow-facing sources: camera, microphone, file replay, network URL.

Each connector is a source node (``connector = "camera"`` in a flow file) that turns
a device from :mod:`devices` into emissions: JPEGs and video segments, WAV chunks.
The pieces, one seam each:

- ``camera``, ``microphone``, ``file``, ``url``: the nodes, thin (options and ports);
- ``_connector``: the shared node shell (open in ``setup``, emit in ``run``);
- ``_video_request``: how a video source is opened (copied or decoded) and the options;
- ``_video`` / ``_audio``: the capture loops that decide what gets emitted, on the
  ports ``_video_ports`` shares; ``_copy_run``: the loop of a source whose H.264/H.265
  is copied, with ``_copy_segments`` (its packets cut at keyframes, ``_copy_jobs``
  putting sound and pictures in one order, ``_copy_sound`` encoding G.711 to AAC) and
  ``_copy_pictures`` (JPEGs decoding as little as ``fps`` needs);
- ``_lanes``: encoding threads behind bounded hand-offs (skip at the capture edge);
- ``_jpeg`` / ``_segments``: JPEG from YUV planes; fMP4/WebM segments encoded;
  ``_frames``: a converter per thread (PyAV's per-frame one must not be shared);
- ``_reconnect``: unplug, backoff, replug; ``_timeline``: pts, gaps and ``seq``;
- ``_emit``: save, stamp the meta, emit; report counters as events;
- ``_options``: option checks; ``_together``: run coroutines, fail as one.

The engine reaches this package only through the connector registry; ``mediaflow
devices`` reaches the device listing through :func:`describe_devices`.
"""

from connectors.camera import CameraConnector
from connectors.file import FileConnector
from connectors.microphone import MicrophoneConnector
from connectors.url import UrlConnector
from devices import describe_devices

__all__ = [
    "CameraConnector",
    "FileConnector",
    "MicrophoneConnector",
    "UrlConnector",
    "describe_devices",
]
