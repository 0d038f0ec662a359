"""What a GET or HEAD of an artifact should answer: a pure decision, made before any I/O.

:func:`decide` maps (method, request headers, the artifact's facts, now) to a
:class:`Decision`; the handler in :mod:`.artifacts` only acts on it. Artifacts
are immutable and content-addressed, so the ETag is the digest itself, a
*strong* validator (RFC 9110 8.8.3): the same tag always means the same bytes.

Preconditions are evaluated in the order of RFC 9110 13.2.2, then the Range
header (14.2). Where aiohttp's ``FileResponse`` differs, this module follows
the RFC:

* ``If-Range`` with an entity-tag is honoured by strong comparison (13.1.5);
  any other validator (a weak tag, an unparsable date, a date that is not
  exactly ``Last-Modified``) means "send the whole representation" (200).
* A Range header in a unit other than ``bytes``, with invalid syntax or with
  several ranges is ignored (14.2: "MAY ignore"): 200 with the whole body.
  Multipart/byteranges is not implemented.
"""

from __future__ import annotations

import email.utils
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

# Longest Range value worth parsing; aiohttp already caps a header line at 8190 bytes.
MAX_RANGE_HEADER = 1024

# Digit strings this short convert with int() quickly and far below its length limit.
_SHORT_DIGITS = 18
# Stands for every position past the largest file offset (off_t is signed 64-bit).
BEYOND = 2**63
_INT_RANGE = re.compile(r"([0-9]+)-([0-9]*)")
# The shape nearly every client sends (``bytes=first-last``): parsed without the general path.
_SIMPLE_RANGE = re.compile(r"bytes=([0-9]{1,15})-([0-9]{1,15})")  # short digits, see above
_SUFFIX_RANGE = re.compile(r"-([0-9]+)")
# entity-tag = [ weak ] opaque-tag; opaque-tag = DQUOTE *etagc DQUOTE (RFC 9110 8.8.3)
_ETAG = re.compile(r'(W/)?"([\x21\x23-\x7e\x80-\xff]*)"')
_OWS = " \t"


class Outcome(Enum):
    """The response a request gets; the value is its status code."""

    FULL = 200
    PARTIAL = 206
    NOT_MODIFIED = 304
    PRECONDITION_FAILED = 412
    RANGE_NOT_SATISFIABLE = 416


@dataclass(frozen=True, slots=True)
class Facts:
    """What the decision needs to know about the artifact.

    ``etag`` is the opaque tag without quotes (the digest); ``last_modified``
    is whole epoch seconds, as sent in ``Last-Modified``.
    """

    etag: str
    size: int
    last_modified: int


class Decision(NamedTuple):
    """``start``/``length`` select the bytes to send (both 0 when there is no body).

    A named tuple: immutable like a frozen dataclass, and cheaper to build per request.
    """

    outcome: Outcome
    start: int = 0
    length: int = 0

    @property
    def status(self) -> int:
        return self.outcome.value

    def content_range(self, size: int) -> str | None:
        """The ``Content-Range`` value this answer carries (RFC 9110 14.4), if any."""
        if self.outcome is Outcome.PARTIAL:
            return f"bytes {self.start}-{self.start + self.length - 1}/{size}"
        if self.outcome is Outcome.RANGE_NOT_SATISFIABLE:
            return f"bytes */{size}"  # 14.4: unsatisfied-range carries the complete length
        return None


class ByteRange(NamedTuple):
    """One parsed range-spec (RFC 9110 14.1.1): ``first``-``last`` or a ``suffix``.

    A position past the largest file offset is :data:`BEYOND`, which is all
    :func:`select` needs to know of it (so a 5,000-digit position neither
    costs a huge int nor trips Python's int-conversion limit).
    """

    first: int | None
    last: int | None
    suffix: int | None = None


# Answers without a body carry nothing request-specific: shared, as they are immutable.
_PRECONDITION_FAILED = Decision(Outcome.PRECONDITION_FAILED)
_NOT_MODIFIED = Decision(Outcome.NOT_MODIFIED)
_NOT_SATISFIABLE = Decision(Outcome.RANGE_NOT_SATISFIABLE)


def decide(method: str, headers: Mapping[str, str], facts: Facts, now: float) -> Decision:
    """Decide the answer to ``method`` (GET or HEAD) on an existing artifact.

    ``headers`` is the request's header mapping (case-insensitive in aiohttp;
    a plain dict must use the canonical spellings). ``now`` is epoch seconds,
    used for the strength of ``Last-Modified`` (RFC 9110 8.8.2.2). ``facts.size``
    is a file's size, so below :data:`BEYOND`. Pure; never raises for any header
    content.
    """
    if method not in ("GET", "HEAD"):
        raise ValueError(f"decide() answers GET and HEAD, not {method}")
    # Most requests carry no precondition: four lookups skip steps 1-4 of 13.2.2.
    if (
        "If-Match" in headers
        or "If-Unmodified-Since" in headers
        or "If-None-Match" in headers
        or "If-Modified-Since" in headers
    ):
        refused = _preconditions(headers, facts)
        if refused is not None:
            return refused
    # Step 5: Range, defined for GET only (14.2: a server MUST ignore it for other methods).
    range_value = headers.get("Range")
    if method == "GET" and range_value is not None:
        spec = parse_range(range_value)
        if spec is not None:
            if_range = headers.get("If-Range")
            # 13.1.5: when the If-Range condition is false, the Range is ignored.
            if if_range is None or if_range_holds(if_range, facts, now):
                return select(spec, facts.size)
    return Decision(Outcome.FULL, 0, facts.size)


def _preconditions(headers: Mapping[str, str], facts: Facts) -> Decision | None:
    """RFC 9110 13.2.2 steps 1-4: the 412 or 304 the conditional headers call for, if any."""
    # Step 1: If-Match, strong comparison (13.1.1).
    if_match = _field(headers, "If-Match")
    if if_match is not None:
        if not _etag_matches(if_match, facts.etag, weak=False):
            return _PRECONDITION_FAILED
    else:
        # Step 2: If-Unmodified-Since, only without If-Match (13.1.4).
        since = _http_date(headers.get("If-Unmodified-Since"))
        if since is not None and facts.last_modified > since:
            return _PRECONDITION_FAILED
    # Step 3: If-None-Match, weak comparison (13.1.2); 304 for GET and HEAD.
    if_none_match = _field(headers, "If-None-Match")
    if if_none_match is not None:
        if _etag_matches(if_none_match, facts.etag, weak=True):
            return _NOT_MODIFIED
    else:
        # Step 4: If-Modified-Since, only without If-None-Match (13.1.3).
        modified = _http_date(headers.get("If-Modified-Since"))
        if modified is not None and facts.last_modified <= modified:
            return _NOT_MODIFIED
    return None


def parse_range(value: str) -> ByteRange | None:
    """The single byte range ``value`` asks for, or None when it is to be ignored.

    None for another unit, invalid syntax, several ranges (no multipart here)
    or an oversized value; RFC 9110 14.2 lets a server ignore each of them.
    """
    simple = _SIMPLE_RANGE.fullmatch(value)
    if simple is not None:
        first, last = int(simple[1]), int(simple[2])
        return ByteRange(first, last) if first <= last else None
    if len(value) > MAX_RANGE_HEADER:
        return None
    unit, equals, range_set = value.partition("=")
    # 14.1: range units are compared case-insensitively; no whitespace around "=".
    if not equals or unit.lower() != "bytes":
        return None
    # 5.6.1.2: empty list elements are allowed and ignored.
    specs = [s.strip(_OWS) for s in range_set.split(",")]
    specs = [s for s in specs if s]
    if len(specs) != 1:
        return None
    spec = specs[0]
    matched = _INT_RANGE.fullmatch(spec)
    if matched is not None:
        first_digits, last_digits = matched.group(1), matched.group(2)
        if last_digits and _num(first_digits) > _num(last_digits):
            return None  # 14.1.1: last-pos < first-pos makes the range-spec invalid
        return ByteRange(_position(first_digits), _position(last_digits) if last_digits else None)
    matched = _SUFFIX_RANGE.fullmatch(spec)
    if matched is not None:
        return ByteRange(None, None, _position(matched.group(1)))
    return None


def select(spec: ByteRange, size: int) -> Decision:
    """The bytes a valid range selects from a representation of ``size`` bytes (14.1.1)."""
    first, last, suffix = spec
    if first is None:
        assert suffix is not None
        if suffix == 0:
            return _NOT_SATISFIABLE
        if size == 0:
            # A non-zero suffix is satisfiable even for an empty representation, but
            # selects nothing a Content-Range could name: send the (empty) whole.
            return Decision(Outcome.FULL, 0, 0)
        length = suffix if suffix < size else size
        return Decision(Outcome.PARTIAL, size - length, length)
    if first >= size:
        return _NOT_SATISFIABLE
    # 14.1.2: a missing or too large last-pos means "to the end".
    end = size - 1 if last is None or last >= size else last
    return Decision(Outcome.PARTIAL, first, end - first + 1)


def if_range_holds(value: str, facts: Facts, now: float) -> bool:
    """RFC 9110 13.1.5: True when the representation is unchanged, so the Range applies.

    An entity-tag must match by strong comparison (a weak tag never does); a
    date must equal ``Last-Modified`` exactly, and only counts while that date
    is a strong validator (8.8.2.2: at least a second older than now).
    """
    value = value.strip(_OWS)
    if value.startswith(('"', "W/")):
        matched = _ETAG.fullmatch(value)
        return matched is not None and matched.group(1) is None and matched.group(2) == facts.etag
    date = _http_date(value)
    return date is not None and date == facts.last_modified and now - facts.last_modified >= 1


def _etag_matches(field: str, etag: str, *, weak: bool) -> bool:
    """Whether an If-Match / If-None-Match value matches ``etag`` (RFC 9110 8.8.3.2).

    ``*`` matches any current representation. A malformed list matches nothing.
    """
    field = field.strip(_OWS)
    if field == "*":
        return True
    for member in field.split(","):
        member = member.strip(_OWS)
        if not member:
            continue
        matched = _ETAG.fullmatch(member)
        if matched is None:
            continue
        is_weak = matched.group(1) is not None
        if matched.group(2) == etag and (weak or not is_weak):
            return True
    return False


def _field(headers: Mapping[str, str], name: str) -> str | None:
    """A list-valued header, with repeated lines joined by commas (RFC 9110 5.3)."""
    getall = getattr(headers, "getall", None)
    if getall is not None:
        values: list[str] = getall(name, [])
        return ", ".join(values) if values else None
    return headers.get(name)


def _http_date(value: str | None) -> int | None:
    """An HTTP-date as epoch seconds, or None if absent or invalid (RFC 9110 5.6.7).

    13.1.3/13.1.4: an invalid date, or one with more than one member, is ignored.
    """
    if value is None or len(value) > 64:
        return None
    try:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        if parsed[9] is None:  # no zone given: HTTP dates are GMT, not local time
            parsed = (*parsed[:9], 0)
        return int(email.utils.mktime_tz(parsed))
    except (ValueError, OverflowError, TypeError, IndexError):
        return None


def _num(digits: str) -> tuple[int, str]:
    """A sort key for a decimal digit string of any length: compare magnitudes exactly."""
    stripped = digits.lstrip("0")
    return len(stripped), stripped


def _position(digits: str) -> int:
    """A position's value, capped at :data:`BEYOND`."""
    stripped = digits.lstrip("0")
    if len(stripped) > _SHORT_DIGITS + 1:
        return BEYOND
    return min(int(stripped or "0"), BEYOND)
