"""The pure GET/HEAD decisions (mediaflow.server.ranges), as tables: RFC 9110
preconditions (13.2.2 order), Range (14.1-14.2), If-Range (13.1.5)."""

from __future__ import annotations

from collections.abc import Callable
from email.utils import formatdate

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from mediaflow.server.ranges import Decision, Facts, Outcome, decide, parse_range

ETAG = "sha256:" + "ab" * 32
LM = 1_700_000_000
FACTS = Facts(ETAG, 1000, LM)
NOW = LM + 3600.0
LM_DATE = formatdate(LM, usegmt=True)
Q = f'"{ETAG}"'

FULL = Decision(Outcome.FULL, 0, 1000)
NOT_SATISFIABLE = Decision(Outcome.RANGE_NOT_SATISFIABLE)


def partial(start: int, length: int) -> Decision:
    return Decision(Outcome.PARTIAL, start, length)


@pytest.mark.parametrize(
    ("range_value", "expected"),
    [
        ("bytes=0-0", partial(0, 1)),
        ("bytes=10-19", partial(10, 10)),
        ("bytes=990-", partial(990, 10)),  # open range
        ("bytes=0-", partial(0, 1000)),
        ("bytes=-10", partial(990, 10)),  # suffix
        ("bytes=-5000", partial(0, 1000)),  # suffix longer than the file: all of it
        ("bytes=500-99999999999999999999999", partial(500, 500)),  # last-pos clamped
        ("BYTES=5-9", partial(5, 5)),  # the unit is case-insensitive
        ("bytes= 5-9 ", partial(5, 5)),  # OWS around a list element
        ("bytes=5-9,", partial(5, 5)),  # empty list elements are ignored
        ("bytes=999-999", partial(999, 1)),
        ("bytes=1000-", NOT_SATISFIABLE),
        ("bytes=1000-2000", NOT_SATISFIABLE),
        pytest.param("bytes=" + "9" * 1000 + "-", NOT_SATISFIABLE, id="huge-first-pos"),
        pytest.param("bytes=" + "9" * 5000 + "-", FULL, id="oversized-header-ignored"),
        ("bytes=-0", NOT_SATISFIABLE),
        ("items=0-5", FULL),  # another unit: ignored
        ("bytes=0-5,10-15", FULL),  # several ranges: ignored (no multipart)
        ("bytes=9-5", FULL),  # last < first: invalid, ignored
        ("bytes=abc", FULL),
        ("bytes=", FULL),
        ("bytes", FULL),
        ("bytes=--5", FULL),
        ("bytes=1-2-3", FULL),
        ("bytes=\x005-9", FULL),
        ("", FULL),
    ],
)
def test_range(range_value: str, expected: Decision) -> None:
    assert decide("GET", {"Range": range_value}, FACTS, NOW) == expected


def test_head_ignores_range() -> None:
    # RFC 9110 14.2: range handling is defined for GET only.
    assert decide("HEAD", {"Range": "bytes=0-5"}, FACTS, NOW) == FULL


def test_empty_representation() -> None:
    empty = Facts(ETAG, 0, LM)
    assert decide("GET", {"Range": "bytes=0-"}, empty, NOW).outcome is Outcome.RANGE_NOT_SATISFIABLE
    assert decide("GET", {"Range": "bytes=-5"}, empty, NOW) == Decision(Outcome.FULL, 0, 0)


@pytest.mark.parametrize(
    ("if_range", "expected"),
    [
        (Q, partial(0, 6)),  # the strong ETag: the range applies
        (f"W/{Q}", FULL),  # a weak tag never matches in If-Range
        ('"sha256:other"', FULL),
        (LM_DATE, partial(0, 6)),  # exactly Last-Modified
        (formatdate(LM - 1, usegmt=True), FULL),
        (formatdate(LM + 1, usegmt=True), FULL),  # only an exact date counts
        ("not a date", FULL),
        ('"unterminated', FULL),
        ("", FULL),
    ],
)
def test_if_range(if_range: str, expected: Decision) -> None:
    headers = {"Range": "bytes=0-5", "If-Range": if_range}
    assert decide("GET", headers, FACTS, NOW) == expected


def test_if_range_date_needs_a_strong_last_modified() -> None:
    # 8.8.2.2: a Last-Modified less than a second before now is weak.
    headers = {"Range": "bytes=0-5", "If-Range": LM_DATE}
    assert decide("GET", headers, FACTS, LM + 0.5) == FULL


def test_if_range_false_ignores_an_unsatisfiable_range() -> None:
    headers = {"Range": "bytes=5000-", "If-Range": '"other"'}
    assert decide("GET", headers, FACTS, NOW) == FULL


@pytest.mark.parametrize(
    ("headers", "outcome"),
    [
        ({"If-None-Match": Q}, Outcome.NOT_MODIFIED),
        ({"If-None-Match": f"W/{Q}"}, Outcome.NOT_MODIFIED),  # weak comparison
        ({"If-None-Match": f'"x", {Q}'}, Outcome.NOT_MODIFIED),
        ({"If-None-Match": "*"}, Outcome.NOT_MODIFIED),
        ({"If-None-Match": '"x"'}, Outcome.FULL),
        ({"If-None-Match": "garbage"}, Outcome.FULL),
        ({"If-Modified-Since": LM_DATE}, Outcome.NOT_MODIFIED),
        ({"If-Modified-Since": formatdate(LM - 10, usegmt=True)}, Outcome.FULL),
        ({"If-Modified-Since": "yesterday"}, Outcome.FULL),
        # 13.1.3: If-Modified-Since is ignored when If-None-Match is present.
        ({"If-None-Match": '"x"', "If-Modified-Since": LM_DATE}, Outcome.FULL),
        ({"If-Match": Q}, Outcome.FULL),
        ({"If-Match": "*"}, Outcome.FULL),
        ({"If-Match": f"W/{Q}"}, Outcome.PRECONDITION_FAILED),  # strong comparison
        ({"If-Match": '"x"'}, Outcome.PRECONDITION_FAILED),
        ({"If-Unmodified-Since": formatdate(LM - 10, usegmt=True)}, Outcome.PRECONDITION_FAILED),
        ({"If-Unmodified-Since": LM_DATE}, Outcome.FULL),
        ({"If-Match": Q, "If-Unmodified-Since": formatdate(0, usegmt=True)}, Outcome.FULL),
        # Order (13.2.2): If-Match fails before If-None-Match is looked at.
        ({"If-Match": '"x"', "If-None-Match": Q}, Outcome.PRECONDITION_FAILED),
        # A 304 wins over a Range.
        ({"If-None-Match": Q, "Range": "bytes=0-5"}, Outcome.NOT_MODIFIED),
    ],
)
def test_preconditions(headers: dict[str, str], outcome: Outcome) -> None:
    assert decide("GET", headers, FACTS, NOW).outcome is outcome


@pytest.mark.parametrize(
    ("name", "value", "outcome"),
    [
        ("If-Match", '"x"', Outcome.PRECONDITION_FAILED),
        ("If-Unmodified-Since", formatdate(LM - 10, usegmt=True), Outcome.PRECONDITION_FAILED),
        ("If-None-Match", Q, Outcome.NOT_MODIFIED),
        ("If-Modified-Since", LM_DATE, Outcome.NOT_MODIFIED),
        ("If-Range", '"other"', Outcome.FULL),
    ],
)
@pytest.mark.parametrize("spelling", [str, str.lower, str.upper])
def test_each_conditional_header_alone_counts_in_any_spelling(
    name: str, value: str, outcome: Outcome, spelling: Callable[[str], str]
) -> None:
    # Requests without conditional headers take a shorter path; any one of them leaves it.
    headers = CIMultiDictProxy(CIMultiDict({spelling(name): value, "range": "bytes=0-5"}))
    assert decide("GET", headers, FACTS, NOW).outcome is outcome
    assert decide("GET", {name: value, "Range": "bytes=0-5"}, FACTS, NOW).outcome is outcome


def test_no_conditional_header_with_a_range_is_partial() -> None:
    headers = CIMultiDictProxy(CIMultiDict({"Host": "x", "RANGE": "bytes=10-19"}))
    assert decide("GET", headers, FACTS, NOW) == partial(10, 10)


@pytest.mark.parametrize(
    ("name", "lines", "outcome"),
    [
        ("If-None-Match", ['"x"', Q], Outcome.NOT_MODIFIED),
        ("If-Match", ['"x"', Q], Outcome.FULL),
        ("If-Match", ['"x"', '"y"'], Outcome.PRECONDITION_FAILED),
    ],
)
def test_repeated_field_lines_form_one_list(name: str, lines: list[str], outcome: Outcome) -> None:
    # RFC 9110 5.3: a list-valued field may be split over several lines.
    headers = CIMultiDictProxy(CIMultiDict([(name, line) for line in lines]))
    assert decide("GET", headers, FACTS, NOW).outcome is outcome


@pytest.mark.parametrize(
    ("range_value", "size", "expected"),
    [
        # Positions around the length where int() is used directly (18 digits).
        ("bytes=" + "9" * 18 + "-", 10**18, partial(10**18 - 1, 1)),
        ("bytes=" + "9" * 18 + "-", 10**18 - 1, NOT_SATISFIABLE),
        ("bytes=" + "1" + "0" * 18 + "-", 10**18 + 1, partial(10**18, 1)),
        ("bytes=" + "1" + "0" * 18 + "-", 10**18, NOT_SATISFIABLE),
        ("bytes=0-" + "9" * 19, 2**63 - 1, partial(0, 2**63 - 1)),  # the largest file
        ("bytes=" + "9" * 19 + "-", 2**63 - 1, NOT_SATISFIABLE),
        ("bytes=5-" + "0" * 30 + "7", 1000, partial(5, 3)),  # leading zeros
    ],
)
def test_range_positions_near_the_int_limit(
    range_value: str, size: int, expected: Decision
) -> None:
    assert decide("GET", {"Range": range_value}, Facts(ETAG, size, LM), NOW) == expected


def test_content_range_values() -> None:
    assert partial(10, 10).content_range(1000) == "bytes 10-19/1000"
    assert NOT_SATISFIABLE.content_range(1000) == "bytes */1000"
    assert FULL.content_range(1000) is None


def test_parse_range_keeps_huge_positions_exact() -> None:
    big = "1" + "0" * 30
    assert parse_range(f"bytes={big}-{big}") is not None
    assert parse_range(f"bytes={big}1-{big}") is None


def test_decide_refuses_other_methods() -> None:
    with pytest.raises(ValueError, match="GET and HEAD"):
        decide("PUT", {}, FACTS, NOW)
