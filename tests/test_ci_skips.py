"""A skip fails the run where CI is set, and says why; elsewhere it stays a skip."""

from __future__ import annotations

import pytest

from tests.ci_skips import in_ci

SUITE = """
import pytest

@pytest.fixture
def chromium():
    pytest.skip("Chromium not found (apt-get install chromium)")

def test_passes():
    pass

def test_needs_a_browser(chromium):
    pass

@pytest.mark.skipif(True, reason="paplay is not installed")
def test_needs_paplay():
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_known_failure():
    assert False
"""

MODULE_SKIP = """
import pytest
pytest.importorskip("a_module_nobody_has")

def test_never_collected():
    pass
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    return pytester.runpytest_inprocess("-p", "tests.ci_skips", "-p", "no:cacheprovider", *args)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("1", True), ("yes", True), ("", False), ("0", False), ("false", False),
     ("False", False), ("no", False)],
)  # fmt: skip
def test_ci_is_read_from_the_environment(value: str, expected: bool) -> None:
    assert in_ci({"CI": value}) is expected
    assert in_ci({}) is False


def test_in_ci_each_skip_fails_with_its_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(test_suite=SUITE)
    result = run(pytester)
    # Both skips happen while setting the test up, so each fails as an error.
    result.assert_outcomes(passed=1, errors=2, xfailed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*skips failed in CI (CI is set)*",
            "*test_needs_a_browser: Chromium not found (apt-get install chromium)",
            "*test_needs_paplay: paplay is not installed",
        ],
        consecutive=False,
    )


def test_in_ci_a_module_skipped_at_collection_stops_the_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "1")
    pytester.makepyfile(test_suite=SUITE, test_module_skip=MODULE_SKIP)
    result = run(pytester)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*ERROR collecting test_module_skip.py*", "*could not import 'a_module_nobody_has'*"],
        consecutive=False,
    )


def test_outside_ci_a_skip_stays_a_skip(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "false")
    pytester.makepyfile(test_suite=SUITE, test_module_skip=MODULE_SKIP)
    result = run(pytester, "-rs")
    result.assert_outcomes(passed=1, skipped=3, xfailed=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*SKIPPED*Chromium not found*"])
