"""Environment variables are read at the process boundary only: in the settings
modules and the command line (issue 26). A library module takes typed settings;
this test finds any other module that reads ``os.environ`` or ``os.getenv``, or
that reads them indirectly by calling a settings reader (``EngineSettings.from_env()``,
``sqlite_sync()``, ``env_int(...)``, ...)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("mediaflow", "connectors", "devices")
ALLOWED = {
    "mediaflow/config.py",
    "mediaflow/server/settings.py",
    "mediaflow/gc/settings.py",
    "mediaflow/forward/settings.py",
}
ALLOWED_UNDER = ("mediaflow/cli/",)

READERS = {"from_env", "default_data_dir", "sqlite_sync", "env_int", "env_float", "env_bytes"}
READERS |= {"env_secret"}
"""The functions that read the environment on a caller's behalf (config and the
settings modules): calling one is reading the environment."""

# Library modules that still call a reader, and why no boundary hands them settings.
READS_LEFT = {
    # save_artifact outside any flow (a script) has no process boundary: its default
    # store is the one MEDIAFLOW_DATA and MEDIAFLOW_STORE name, read when first needed.
    "mediaflow/store/current.py",
    # The webhook's HMAC key is in the variable its flow names (secret_env): which one
    # is known only when the flow file is read, so no settings object can carry it.
    "mediaflow/nodes/webhook.py",
}


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


def reader_calls(source: str) -> list[int]:
    """The line numbers that call one of :data:`READERS`, by name or as an attribute."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name in READERS:
            lines.append(node.lineno)
    return lines


def product_modules() -> list[tuple[str, str]]:
    """``(path from the repository, source)`` of every module of the product."""
    return [
        (path.relative_to(REPO).as_posix(), path.read_text())
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
    ]


def at_the_boundary(name: str) -> bool:
    return name in ALLOWED or name.startswith(ALLOWED_UNDER)


def test_the_environment_is_read_only_in_settings_and_cli_modules() -> None:
    found = []
    for name, source in product_modules():
        if not at_the_boundary(name):
            found += [f"{name}:{line}" for line in env_reads(source)]
    assert found == []


def test_settings_are_read_from_the_environment_only_at_the_boundary() -> None:
    found = []
    for name, source in product_modules():
        if not at_the_boundary(name) and name not in READS_LEFT:
            found += [f"{name}:{line}" for line in reader_calls(source)]
    assert found == [], "take typed settings; read them at the boundary (mediaflow/cli/)"


def test_what_is_left_still_reads() -> None:
    sources = dict(product_modules())
    gone = sorted(name for name in READS_LEFT if not reader_calls(sources.get(name, "")))
    assert gone == [], "these read nothing any more: take them out of READS_LEFT"


def test_the_check_sees_each_way_of_reading() -> None:
    assert env_reads("import os\nos.environ.get('X')\n") == [2]
    assert env_reads("import os\nos.getenv('X')\n") == [2]
    assert env_reads("from os import environ\n") == [1]
    assert env_reads("import os\nos.path.join('a')\n") == []


def test_the_check_sees_each_settings_reader() -> None:
    assert reader_calls("s = settings or EngineSettings.from_env()\n") == [1]
    assert reader_calls("from mediaflow import config\nconfig.sqlite_sync()\n") == [2]
    assert reader_calls("x = 1\nn = env_int('MEDIAFLOW_X', 3)\n") == [2]
    assert reader_calls("d = default_data_dir()\n") == [1]
    # Naming a setting, or passing one on, reads nothing.
    assert reader_calls("open_queue(url, d, sqlite_sync=settings.sqlite_sync)\n") == []
    assert reader_calls("def f(sqlite_sync: str = 'NORMAL') -> None: ...\n") == []
    assert reader_calls("reader = GcSettings.from_env\n") == []
