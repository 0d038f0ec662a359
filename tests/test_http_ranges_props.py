"""Property test of :func:`mediaflow.server.ranges.decide`: random header sets,
drawn as meanings (a matching tag, a date one second late, a range past the
end) and rendered as header lines in any spelling, must get the answer RFC
9110 gives (13.2.2 order, 13.1.1-13.1.5, 14.1-14.2), computed here from the
meanings alone. The string-level edge cases are the tables in test_http_ranges.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate

from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy

from mediaflow.server.ranges import Decision, Facts, Outcome, decide

ETAG = "sha256:" + "cd" * 32
LM = 1_700_000_000
PROPS = settings(max_examples=1000, deadline=None, database=None)


@dataclass(frozen=True)
class Header:
    """One header field: what it means for this artifact and how it is written."""

    lines: tuple[str, ...]  # more than one: repeated field lines (RFC 9110 5.3)
    holds: bool  # the tag list matches / the condition is true / the date counts


def _tag(kind: str) -> str:
    return {"same": f'"{ETAG}"', "same-weak": f'W/"{ETAG}"', "other": '"x"', "other-weak": 'W/"x"'}[
        kind
    ]


@st.composite
def tag_lists(draw: st.DrawFn, *, weak: bool) -> Header:
    """If-Match (strong comparison) or If-None-Match (weak comparison) (13.1.1-13.1.2)."""
    if draw(st.booleans()):
        value = draw(st.sampled_from(["*", "garbage", ""]))
        return Header((value,), value == "*")
    kinds = draw(
        st.lists(st.sampled_from(["same", "same-weak", "other", "other-weak"]), min_size=1)
    )
    tags = [_tag(kind) for kind in kinds]
    cut = draw(st.integers(1, len(tags)))  # one field line, or the list split over two
    lines = (
        (", ".join(tags[:cut]), ", ".join(tags[cut:])) if cut < len(tags) else (", ".join(tags),)
    )
    holds = "same" in kinds or (weak and "same-weak" in kinds)
    return Header(lines, holds)


@st.composite
def dates(draw: st.DrawFn, *, modified: bool) -> Header:
    """If-Modified-Since (holds: not modified since) or If-Unmodified-Since (holds: modified)."""
    offset = draw(st.one_of(st.none(), st.integers(-3, 3)))
    if offset is None:
        return Header((draw(st.sampled_from(["yesterday", ""])),), False)  # invalid: ignored
    date = formatdate(LM + offset, usegmt=True)
    return Header((date,), offset >= 0 if modified else offset < 0)


@dataclass(frozen=True)
class Range:
    value: str
    first: int | None = None  # None for a suffix
    last: int | None = None
    suffix: int | None = None
    valid: bool = True


@st.composite
def ranges(draw: st.DrawFn) -> Range:
    """A Range header: one byte range (maybe past the end or reversed), or one to ignore."""
    unit = draw(st.sampled_from(["bytes", "BYTES"]))
    position = st.one_of(st.integers(0, 60), st.integers(0, 10**30))
    kind = draw(st.sampled_from(["closed", "open", "suffix", "ignored"]))
    if kind == "closed":
        first, last = draw(position), draw(position)
        return Range(f"{unit}={first}-{last}", first, last, valid=first <= last)
    if kind == "open":
        first = draw(position)
        return Range(f"{unit}={first}-", first)
    if kind == "suffix":
        suffix = draw(position)
        return Range(f"{unit}=-{suffix}", suffix=suffix)
    ignored = ["items=0-5", "bytes=0-1,3-4", "bytes=abc", "bytes", "bytes=-", ""]
    return Range(draw(st.sampled_from(ignored)), valid=False)


@st.composite
def if_ranges(draw: st.DrawFn, now: float) -> Header:
    """If-Range: only the strong tag, or exactly a strong Last-Modified, holds (13.1.5)."""
    kind = draw(st.sampled_from(["same", "same-weak", "other", "date", "other-date", "junk"]))
    if kind == "date":
        return Header((formatdate(LM, usegmt=True),), now - LM >= 1)
    if kind == "other-date":
        return Header((formatdate(LM + draw(st.sampled_from([-1, 1])), usegmt=True),), False)
    if kind == "junk":
        return Header(("not a date",), False)
    return Header((_tag(kind),), kind == "same")


def selected(spec: Range, size: int) -> Decision:
    """RFC 9110 14.1.1-14.1.2 with plain integers."""
    if spec.suffix is not None:
        if spec.suffix == 0:
            return Decision(Outcome.RANGE_NOT_SATISFIABLE)
        if size == 0:
            return Decision(Outcome.FULL, 0, 0)
        length = min(spec.suffix, size)
        return Decision(Outcome.PARTIAL, size - length, length)
    assert spec.first is not None
    if spec.first >= size:
        return Decision(Outcome.RANGE_NOT_SATISFIABLE)
    last = size - 1 if spec.last is None else min(spec.last, size - 1)
    return Decision(Outcome.PARTIAL, spec.first, last - spec.first + 1)


@dataclass(frozen=True)
class Request:
    method: str
    now: float
    size: int
    fields: dict[str, Header]
    range: Range | None


@st.composite
def requests(draw: st.DrawFn) -> Request:
    now = draw(st.sampled_from([LM + 0.5, LM + 3600.0]))
    optional = {
        "If-Match": tag_lists(weak=False),
        "If-Unmodified-Since": dates(modified=False),
        "If-None-Match": tag_lists(weak=True),
        "If-Modified-Since": dates(modified=True),
        "If-Range": if_ranges(now),
    }
    fields = draw(st.fixed_dictionaries({}, optional=optional))
    return Request(
        method=draw(st.sampled_from(["GET", "HEAD"])),
        now=now,
        # Small files, and the largest a file can be (its offsets are signed 64-bit).
        size=draw(st.one_of(st.integers(0, 50), st.just(2**63 - 1))),
        fields=fields,
        range=draw(st.one_of(st.none(), ranges())),
    )


def expected(request: Request) -> Decision:
    """The answer, from the meanings: RFC 9110 13.2.2 steps 1-5."""
    fields = request.fields
    if "If-Match" in fields:
        if not fields["If-Match"].holds:
            return Decision(Outcome.PRECONDITION_FAILED)
    elif "If-Unmodified-Since" in fields and fields["If-Unmodified-Since"].holds:
        return Decision(Outcome.PRECONDITION_FAILED)
    if "If-None-Match" in fields:
        if fields["If-None-Match"].holds:
            return Decision(Outcome.NOT_MODIFIED)
    elif "If-Modified-Since" in fields and fields["If-Modified-Since"].holds:
        return Decision(Outcome.NOT_MODIFIED)
    whole = Decision(Outcome.FULL, 0, request.size)
    spec = request.range
    if request.method != "GET" or spec is None or not spec.valid:
        return whole
    if "If-Range" in fields and not fields["If-Range"].holds:
        return whole
    return selected(spec, request.size)


@PROPS
@given(request=requests(), spelling=st.sampled_from([str, str.lower, str.upper]))
def test_decide_follows_the_rules(request: Request, spelling: Callable[[str], str]) -> None:
    lines = [(name, line) for name, field in request.fields.items() for line in field.lines]
    if request.range is not None:
        lines.append(("Range", request.range.value))
    headers = CIMultiDictProxy(CIMultiDict((spelling(name), value) for name, value in lines))
    facts = Facts(ETAG, request.size, LM)
    assert decide(request.method, headers, facts, request.now) == expected(request)
