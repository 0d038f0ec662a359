"""What the live and IP camera benches both read in an HLS playlist."""

from __future__ import annotations

from datetime import datetime


def parse_pdt(text: str) -> float:
    """``EXT-X-PROGRAM-DATE-TIME``'s value as epoch seconds (``Z``, ``+00:00``, ``+0000``)."""
    return datetime.fromisoformat(text.strip()).timestamp()
