"""Recordings as a timeline, and the events worth looking at on it.

- :mod:`.events`: an event (type, source, start, end, score, snapshot) and its JSON.
- :mod:`.index`: ``timeline.sqlite3``, the clips recorders kept and the events
  nodes noted, by wall-clock time (nodes write it through ``ctx.more``).
- :mod:`.cut` (pure) and :mod:`.export`: a recorded range as one MP4, without
  re-encoding (``/api/recordings/{flow}/{node}/export.mp4``, ``mediaflow export``).
"""

from mediaflow.timeline.cut import (
    BadRange,
    CannotExport,
    ClipFile,
    ExportError,
    NothingRecorded,
    RangeTooLong,
)
from mediaflow.timeline.events import EventError, TimelineEvent
from mediaflow.timeline.export import (
    ExportOptions,
    ExportProgress,
    ExportResult,
    export_clips,
    export_recording,
)
from mediaflow.timeline.index import NotedEvent, RecordedClip, TimelineIndex

__all__ = [
    "BadRange",
    "CannotExport",
    "ClipFile",
    "EventError",
    "ExportError",
    "ExportOptions",
    "ExportProgress",
    "ExportResult",
    "NotedEvent",
    "NothingRecorded",
    "RangeTooLong",
    "RecordedClip",
    "TimelineEvent",
    "TimelineIndex",
    "export_clips",
    "export_recording",
]
