"""Built-in nodes that flows name with ``use = "..."`` (see :mod:`mediaflow.flows.registry`).

Each lives in its own module and is imported only when a flow uses it, so a
missing optional dependency (``pocketsphinx`` for ``speech``) only hurts the
flows that need it:

- ``speech``: :mod:`mediaflow.nodes.speech` (audio chunks to transcripts);
  :mod:`mediaflow.nodes.recognizer` is the interface another speech engine
  implements.
"""
