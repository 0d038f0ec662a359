"""GC settings, and how the process boundary reads them from the environment
(:meth:`GcSettings.from_env`), each refusing a value it cannot use in one line."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from mediaflow.config import ConfigError, env_float, env_int

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")


def parse_bytes(text: str) -> int:
    """``"50MB"`` → 50_000_000, ``"2GiB"``, ``"1.5 GB"``, ``"123"``. Raises ``ValueError``."""
    match = _SIZE.fullmatch(text)
    unit = _UNITS.get(match.group(2).lower()) if match else None
    if match is None or unit is None:
        raise ValueError(
            f"{text!r} is not a size (a number with an optional unit: B, KB, MB, GB, TB,"
            " KiB, MiB, GiB, TiB)"
        )
    return int(float(match.group(1)) * unit)


def format_bytes(count: float) -> str:
    """``1234567`` → ``"1.2 MB"``: for people, in decimal units."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(count) < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class GcSettings:
    """When sweeps run and what they spare; each field mirrors an environment variable.

    The defaults are the built-in ones; :meth:`from_env` reads the variables.
    """

    interval_s: float = 3600.0  # ARTIFACT_GC_INTERVAL_S; 0 turns periodic sweeps off
    grace_s: float = 3600.0  # ARTIFACT_GC_GRACE_S: anything saved this recently is spared
    max_bytes: int | None = None  # ARTIFACT_MAX_BYTES: the disk cap (None: no cap)
    cap_check_s: float = 1.0  # ARTIFACT_CAP_CHECK_S: how often the cap is checked
    dead_letter_days: float = 30.0  # MEDIAFLOW_DEAD_LETTER_DAYS
    dead_letter_keep: int = 10_000  # MEDIAFLOW_DEAD_LETTER_KEEP: per flow, newest first
    run_record_days: float = 30.0  # MEDIAFLOW_RUN_RECORD_DAYS: ended runs kept this long
    run_record_keep: int = 20  # MEDIAFLOW_RUN_RECORD_KEEP: per flow, whatever their age
    temp_age_s: float = 3600.0  # MEDIAFLOW_TEMP_AGE_S: temp files untouched this long go
    # MEDIAFLOW_LEASE_MS, the engine's lease (EngineSettings.lease_ms): a run whose owner
    # has not beaten for two leases is dead, and what it saved is no longer spared.
    lease_ms: int = 15_000

    @classmethod
    def from_env(cls) -> GcSettings:
        """Raises :class:`~mediaflow.config.ConfigError` naming the variable."""
        d = cls()
        return cls(
            interval_s=env_float("ARTIFACT_GC_INTERVAL_S", d.interval_s),
            grace_s=env_float("ARTIFACT_GC_GRACE_S", d.grace_s),
            max_bytes=env_bytes("ARTIFACT_MAX_BYTES"),
            cap_check_s=env_float("ARTIFACT_CAP_CHECK_S", d.cap_check_s, minimum=0.05),
            dead_letter_days=env_float("MEDIAFLOW_DEAD_LETTER_DAYS", d.dead_letter_days),
            dead_letter_keep=env_int("MEDIAFLOW_DEAD_LETTER_KEEP", d.dead_letter_keep),
            run_record_days=env_float("MEDIAFLOW_RUN_RECORD_DAYS", d.run_record_days),
            run_record_keep=env_int("MEDIAFLOW_RUN_RECORD_KEEP", d.run_record_keep, minimum=1),
            temp_age_s=env_float("MEDIAFLOW_TEMP_AGE_S", d.temp_age_s),
            lease_ms=env_int("MEDIAFLOW_LEASE_MS", d.lease_ms, minimum=100),
        )


def env_bytes(name: str) -> int | None:
    """A positive size from the environment (``"50MB"``, see :func:`parse_bytes`), or
    None when unset. Raises :class:`ConfigError` naming the variable."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = parse_bytes(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r} must be more than 0 (unset it for no cap)")
    return value
