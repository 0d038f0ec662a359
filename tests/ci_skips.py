"""In CI a skipped test is a failed one: a real part that is missing there (a Debian
package, Chromium, PulseAudio) must stop the run, not quietly shrink it.

Registered by ``tests/conftest.py``. With ``CI`` set to anything but ``""``, ``0``,
``false`` or ``no`` (CI services set ``CI=true``), every skip (``pytest.skip``,
``importorskip``, a ``skip``/``skipif`` mark, at collection or in a fixture) is
reported as a failure whose text is the skip's reason, and the run ends with a list
of those reasons. An ``xfail`` is left alone. Elsewhere skips stay skips, and ``-ra``
(set in ``pyproject.toml``) lists their reasons at the end.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

CI_VALUES_OFF = frozenset({"", "0", "false", "no"})
_REASONS_KEY = pytest.StashKey[list[str]]()


def in_ci(environ: os._Environ[str] | dict[str, str] = os.environ) -> bool:
    """Whether this run is CI's, by the ``CI`` variable every CI service sets."""
    return environ.get("CI", "").strip().lower() not in CI_VALUES_OFF


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The reason a skipped report gives (pytest stores ``(file, line, reason)``)."""
    longrepr: Any = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail_skip(config: pytest.Config, report: pytest.TestReport | pytest.CollectReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = skip_reason(report)
    config.stash.setdefault(_REASONS_KEY, []).append(f"{report.nodeid}: {reason}")
    report.outcome = "failed"
    report.longrepr = f"skipped in CI, where every real part must be present: {reason}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if in_ci():
        _fail_skip(item.config, report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    if in_ci():
        _fail_skip(collector.config, report)
    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    reasons = config.stash.get(_REASONS_KEY, [])
    if reasons:
        terminalreporter.section("skips failed in CI (CI is set)", red=True)
        for line in reasons:
            terminalreporter.line(line)
