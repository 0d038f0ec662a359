"""Built-in nodes that flows name with ``use = "..."`` (see :mod:`mediaflow.flows.registry`).

Each lives in its own module and is imported only when a flow uses it, so a
missing optional dependency (``pocketsphinx`` for ``speech``) only hurts the
flows that need it:

- ``speech``: :mod:`mediaflow.nodes.speech` (audio chunks to transcripts);
  :mod:`mediaflow.nodes.recognizer` is the interface another speech engine
  implements.
- ``motion``: :mod:`mediaflow.nodes.motion` (camera frames to motion events, per
  zone; the image side in :mod:`mediaflow.nodes.motion_detect`).
- ``loudness``: :mod:`mediaflow.nodes.loudness` (audio chunks to levels and
  loudness events).
  Both start and end events by the rules of :mod:`mediaflow.nodes.event_spans`.
"""
