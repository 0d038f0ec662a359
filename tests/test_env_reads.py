"""Environment variables are read at the process boundary only: in the settings
modules and the command line (issue 26). A library module takes typed settings;
this test finds any other module that reads ``os.environ`` or ``os.getenv``."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("mediaflow", "connectors", "devices")
ALLOWED = {
    "mediaflow/config.py",
    "mediaflow/server/settings.py",
    "mediaflow/gc/settings.py",
    "mediaflow/eventloop.py",  # MEDIAFLOW_LOOP: which event loop, chosen before any runs
}
ALLOWED_UNDER = ("mediaflow/cli/",)


def env_reads(source: str) -> list[int]:
    """The line numbers that touch ``os.environ`` / ``os.getenv`` (or import them)."""
    names = {"environ", "getenv", "environb"}
    lines = []
    for node in ast.walk(ast.parse(source)):
        attribute = (
            isinstance(node, ast.Attribute)
            and node.attr in names
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        )
        imported = (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(a.name in names for a in node.names)
        )
        if attribute or imported:
            lines.append(node.lineno)
    return lines


def test_the_environment_is_read_only_in_settings_and_cli_modules() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            name = path.relative_to(REPO).as_posix()
            if name in ALLOWED or name.startswith(ALLOWED_UNDER):
                continue
            found += [f"{name}:{line}" for line in env_reads(path.read_text())]
    assert found == []


def test_the_check_sees_each_way_of_reading() -> None:
    assert env_reads("import os\nos.environ.get('X')\n") == [2]
    assert env_reads("import os\nos.getenv('X')\n") == [2]
    assert env_reads("from os import environ\n") == [1]
    assert env_reads("import os\nos.path.join('a')\n") == []
