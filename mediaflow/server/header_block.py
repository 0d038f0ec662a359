"""Header lines serialised by hand, for the responses that skip aiohttp's writer.

:class:`HeaderBlock` holds the lines fixed for one artifact (built once, kept on
its :class:`~mediaflow.server.filecache.OpenArtifact`); :func:`check_header`
refuses a name or value that would split a header in two. Both are pure: no
I/O, no aiohttp.
"""

from __future__ import annotations

from collections.abc import Sequence


def check_header(name: str, value: str) -> None:
    """Raise ``ValueError`` if ``name`` or ``value`` holds a CR or LF."""
    # A line break would let a value start a header (or a body) of its own.
    if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
        raise ValueError(f"header {name!r} has a line break in its name or value")


class HeaderBlock:
    """Header lines fixed for one artifact, kept both as pairs and serialised.

    Built once per open artifact: the aiohttp way adds ``pairs`` to a
    response's headers, the lean way sends :meth:`head_start` as it is.
    Raises ``ValueError`` (see :func:`check_header`) for a line break anywhere.
    """

    __slots__ = ("_starts", "pairs", "text")

    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        for name, value in pairs:
            check_header(name, value)
        self.pairs = tuple(pairs)
        self.text = "".join(f"{name}: {value}\r\n" for name, value in self.pairs)
        self._starts: dict[tuple[int, str, int], str] = {}

    def head_start(
        self, version: tuple[int, int], status: int, reason: str, content_type: str
    ) -> str:
        """Status line, these lines and ``Content-Type``: the part of a head that
        repeats from one response to the next."""
        key = (status, content_type, version[1])  # HTTP/1.x
        start = self._starts.get(key)
        if start is None:
            if len(self._starts) >= 16:  # ?type= can name many types; keep a few
                self._starts.clear()
            check_header("Content-Type", content_type)
            start = self._starts[key] = (
                f"HTTP/{version[0]}.{version[1]} {status} {reason}\r\n"
                f"{self.text}Content-Type: {content_type}\r\n"
            )
        return start
