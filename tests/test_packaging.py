"""What a user installs: a wheel carries the demo, and ``mediaflow demo`` runs from
any directory with nothing but that wheel's files (no clone, no samples/)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mediaflow.cli.demo import DEMO_FILES

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=240,
    )
    (built,) = out.glob("mediaflow-*.whl")
    return built


def test_the_wheel_carries_the_demo_and_the_wall(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in DEMO_FILES:
        assert f"mediaflow/demo/{name}" in names
    assert {"mediaflow/server/static/index.html", "mediaflow/server/static/wall.js"} <= names
    assert not any(name.startswith(("samples/", "tests/", "bench/")) for name in names)


@pytest.mark.slow
def test_the_installed_wheel_runs_the_demo_from_another_directory(
    wheel: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
         str(wheel)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The wheel's files come first on the path: the clone's mediaflow is not used.
    env = {**os.environ, "PYTHONPATH": str(site), "HOME": str(tmp_path / "home")}
    env.pop("MEDIAFLOW_DATA", None)
    where = subprocess.run(
        [sys.executable, "-c", "import mediaflow; print(mediaflow.__file__)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert Path(where.stdout.strip()).is_relative_to(site)
    demo = subprocess.run(
        [sys.executable, "-m", "mediaflow", "demo", "--for", "4", "--port", "0"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "serving on http://127.0.0.1:" in demo.stderr
    assert (tmp_path / "home" / ".local" / "share" / "mediaflow" / "queue.sqlite3").is_file()
