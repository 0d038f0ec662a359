"""The GC's settings: byte sizes as people write them (``parse_bytes``,
``format_bytes``) and ``GcSettings.from_env``, which names the variable it refuses.
"""

from __future__ import annotations

import pytest

from mediaflow.config import ConfigError
from mediaflow.gc import GcSettings, format_bytes, parse_bytes


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("123", 123),
        ("50MB", 50_000_000),
        ("50mb", 50_000_000),
        ("2GiB", 2 << 30),
        ("1.5 GB", 1_500_000_000),
        (" 10 KiB ", 10 << 10),
        ("7B", 7),
        ("1TB", 10**12),
    ],
)
def test_parse_bytes(text: str, count: int) -> None:
    assert parse_bytes(text) == count


@pytest.mark.parametrize("text", ["", "banana", "MB", "-5MB", "5 XB", "1e6", "5 M B"])
def test_parse_bytes_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="is not a size"):
        parse_bytes(text)


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.0 KB"),
        (1_234_567, "1.2 MB"),
        (50_000_000, "50.0 MB"),
        (2 << 30, "2.1 GB"),
        (5 * 10**15, "5000.0 TB"),
    ],
)
def test_format_bytes(count: int, text: str) -> None:
    assert format_bytes(count) == text


GC_VARIABLES = [
    "ARTIFACT_GC_INTERVAL_S",
    "ARTIFACT_GC_GRACE_S",
    "ARTIFACT_MAX_BYTES",
    "ARTIFACT_CAP_CHECK_S",
    "MEDIAFLOW_DEAD_LETTER_DAYS",
    "MEDIAFLOW_DEAD_LETTER_KEEP",
    "MEDIAFLOW_RUN_RECORD_DAYS",
    "MEDIAFLOW_RUN_RECORD_KEEP",
    "MEDIAFLOW_TEMP_AGE_S",
    "MEDIAFLOW_LEASE_MS",
]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in GC_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_settings_default_without_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    assert GcSettings.from_env() == GcSettings()
    assert GcSettings().max_bytes is None and GcSettings().grace_s == 3600


@pytest.mark.parametrize(
    ("name", "value", "field", "expected"),
    [
        ("ARTIFACT_MAX_BYTES", "50MB", "max_bytes", 50_000_000),
        ("ARTIFACT_MAX_BYTES", "2GiB", "max_bytes", 2 << 30),
        ("ARTIFACT_MAX_BYTES", "4096", "max_bytes", 4096),
        ("ARTIFACT_MAX_BYTES", " ", "max_bytes", None),
        ("ARTIFACT_GC_INTERVAL_S", "0", "interval_s", 0.0),
        ("ARTIFACT_GC_GRACE_S", "60", "grace_s", 60.0),
        ("ARTIFACT_CAP_CHECK_S", "0.5", "cap_check_s", 0.5),
        ("MEDIAFLOW_DEAD_LETTER_DAYS", "7", "dead_letter_days", 7.0),
        ("MEDIAFLOW_DEAD_LETTER_KEEP", "0", "dead_letter_keep", 0),
        ("MEDIAFLOW_RUN_RECORD_DAYS", "1.5", "run_record_days", 1.5),
        ("MEDIAFLOW_RUN_RECORD_KEEP", "3", "run_record_keep", 3),
        ("MEDIAFLOW_TEMP_AGE_S", "600", "temp_age_s", 600.0),
        ("MEDIAFLOW_LEASE_MS", "2500", "lease_ms", 2500),
    ],
)
def test_settings_from_the_environment(
    clean_env: pytest.MonkeyPatch, name: str, value: str, field: str, expected: object
) -> None:
    clean_env.setenv(name, value)
    assert getattr(GcSettings.from_env(), field) == expected


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ARTIFACT_MAX_BYTES", "banana"),
        ("ARTIFACT_MAX_BYTES", "0"),
        ("ARTIFACT_MAX_BYTES", "0MB"),
        ("ARTIFACT_MAX_BYTES", "-5"),
        ("ARTIFACT_MAX_BYTES", "-1GB"),
        ("ARTIFACT_GC_INTERVAL_S", "hourly"),
        ("ARTIFACT_GC_INTERVAL_S", "-1"),
        ("ARTIFACT_GC_GRACE_S", "-60"),
        ("ARTIFACT_CAP_CHECK_S", "0"),
        ("MEDIAFLOW_DEAD_LETTER_KEEP", "1.5"),
        ("MEDIAFLOW_DEAD_LETTER_DAYS", "-1"),
        ("MEDIAFLOW_RUN_RECORD_KEEP", "0"),
        ("MEDIAFLOW_LEASE_MS", "50"),
    ],
)
def test_settings_refuse_a_bad_value_naming_the_variable(
    clean_env: pytest.MonkeyPatch, name: str, value: str
) -> None:
    clean_env.setenv(name, value)
    with pytest.raises(ConfigError, match=name) as caught:
        GcSettings.from_env()
    assert "\n" not in str(caught.value)
