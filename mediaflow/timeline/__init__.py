"""Recordings as a timeline, and the events worth looking at on it.

- :mod:`.events`: an event (type, source, start, end, score, snapshot) and its JSON.
- :mod:`.index`: ``timeline.sqlite3``, the clips recorders kept and the events
  nodes noted, by wall-clock time (nodes write it through ``ctx.more``).
"""

from mediaflow.timeline.events import EventError, TimelineEvent
from mediaflow.timeline.index import NotedEvent, RecordedClip, TimelineIndex

__all__ = ["EventError", "NotedEvent", "RecordedClip", "TimelineEvent", "TimelineIndex"]
