"""Every flow key, command, flag and HTTP route the docs name exists.

The pages are the README and docs/*.md; the checker is :mod:`tests.docs_names`.
Benchmark commands (``python -m bench.x``) are checked too, and every repository
path the pages (and the other Markdown files of the tree) name or link is in the
tree (:mod:`tests.docs_paths`). Each check is also fed a deliberately wrong name,
to show it fails on one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from mediaflow.server import AppState, ServerSettings, create_app
from tests.docs_names import (
    Route,
    bench_problems,
    cli_problems,
    context_problems,
    doc_pages,
    flow_key_problems,
    route_problems,
)
from tests.docs_paths import ROOT, path_problems

PAGES = doc_pages()
IDS = [page.relative_to(PAGES[0].parent).as_posix() for page in PAGES]
# Every Markdown file of the tree names paths: the README and docs/, the measurements,
# the reliability record, the benchmarks' and the samples' own pages.
MARKDOWN = [*PAGES, *(ROOT / name for name in ("BENCHMARKS.md", "RELIABILITY.md"))]
MARKDOWN += [ROOT / "bench" / "README.md", ROOT / "samples" / "README.md"]


@pytest.fixture(scope="module")
def routes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Route]]:
    """The routes of the app the server builds, as the server tests build it."""

    async def build() -> list[Route]:
        state = AppState(tmp_path_factory.mktemp("docs-app"), settings=ServerSettings(token="t"))
        try:
            app = create_app(state)
            return [
                Route(route.method, route.resource.canonical)
                for route in app.router.routes()
                if route.resource is not None
            ]
        finally:
            await state.close()

    yield asyncio.run(build())


def test_the_docs_are_the_readme_and_one_page_per_topic() -> None:
    names = {page.name for page in PAGES[1:]}
    topics = {"devices", "flows", "nodes", "speech", "recording", "http-api", "storage"}
    topics |= {"scale-out", "operating", "live-view"}
    assert {f"{topic}.md" for topic in topics} | {"README.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_flow_key_the_page_names_is_accepted(page: Path) -> None:
    assert flow_key_problems(page.read_text()) == []


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_command_and_flag_the_page_names_exists(page: Path) -> None:
    assert cli_problems(page.read_text()) == []


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_route_the_page_names_is_served(page: Path, routes: list[Route]) -> None:
    assert route_problems(page.read_text(), routes) == []


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_context_member_the_page_names_exists(page: Path) -> None:
    assert context_problems(page.read_text()) == []


def test_a_context_member_that_is_not_there_fails() -> None:
    assert context_problems("`ctx.emit(port, value)`, `ctx.inputs`") == []
    assert len(context_problems("`ctx.open_artifact(ref)`")) == 1
    assert len(context_problems("```python\nawait ctx.broadcast('x', 1)\n```\n")) == 1


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_benchmark_the_page_names_runs(page: Path) -> None:
    assert bench_problems(page.read_text()) == []


def test_a_benchmark_that_is_not_there_fails() -> None:
    assert bench_problems("`python -m bench.emissions`") == []
    assert len(bench_problems("`python -m bench.nothing_here --wer`")) == 1


def test_the_checks_see_the_docs_names() -> None:
    """The checks find names at all: the pages name these, and more."""
    text = "\n".join(page.read_text() for page in PAGES)
    assert "`max_rate = 2`" in text and "`mediaflow gc" in text and "| option |" in text
    assert "`GET /api/events`" in text and "```toml" in text


def test_a_flow_key_that_is_not_there_fails() -> None:
    assert flow_key_problems("`max_rate = 2`, `retention_days = 7`, `fps = 1`") == []
    assert len(flow_key_problems("`max_rates = 2`")) == 1
    assert len(flow_key_problems('`use = "speach"`')) == 1
    block = '```toml\n[flow]\nname = "x"\nkeep_days = 3\n[[node]]\nid = "a"\n'
    block += 'connector = "camera"\nfps = 1\nframerate = 5\n```\n'
    assert len(flow_key_problems(block)) == 2
    table = "| option | default |\n| --- | --- |\n| `clip_s` | 10 |\n| `clip_len` | 4 |\n"
    assert len(flow_key_problems(table)) == 1


def test_a_command_or_flag_that_is_not_there_fails() -> None:
    ok = "`mediaflow run FLOW.toml [--for S \\| --until-idle] [--jsonl]`, `mediaflow flows pause`"
    assert cli_problems(ok) == []
    assert len(cli_problems("`mediaflow run FLOW.toml --until-done`")) == 1
    assert len(cli_problems("`mediaflow launch FLOW.toml`")) == 1
    assert len(cli_problems("`mediaflow flows halt desk`")) == 1
    assert len(cli_problems("```sh\nmediaflow gc --dry-run --now\n```\n")) == 1
    assert len(cli_problems("start it with `--whatch`")) == 1


def test_a_route_that_is_not_there_fails(routes: list[Route]) -> None:
    ok = "`POST /api/flows/{flow}/pause`, `/resume`; `GET /live/{flow}/{node}.m3u8`, `…/init.mp4`"
    assert route_problems(ok, routes) == []
    assert len(route_problems("`GET /api/flow/{flow}`", routes)) == 1
    assert len(route_problems("`DELETE /api/flows/{flow}`", routes)) == 1
    assert len(route_problems("`GET /api/flows`, `…/restart`", routes)) == 1
    assert len(route_problems("```sh\ncurl http://HOST:8765/api/flowz\n```\n", routes)) == 1


@pytest.mark.parametrize("page", MARKDOWN, ids=[p.relative_to(ROOT).as_posix() for p in MARKDOWN])
def test_every_path_the_page_names_is_in_the_tree(page: Path) -> None:
    assert path_problems(page.read_text(), page.parent) == []


def test_a_path_that_is_not_there_fails() -> None:
    docs = ROOT / "docs"
    assert path_problems("`mediaflow/engine/` and `samples/*.toml`, [x](../README.md)", docs) == []
    assert path_problems("`bench/FAMILY/main.py`, `mediaflow/<package>/__init__.py`.") == []
    assert path_problems("The reducer (mediaflow/engine/reducer.py) decides.") == [
        "mediaflow/engine/reducer.py: no such file or folder"
    ]
    assert path_problems("[storage](storage.md) and [gone](gone.md#x)", docs) == [
        "link gone.md: no such file or folder"
    ]
    assert path_problems("`connectors/_nothing/*.py`") == [
        "connectors/_nothing/*.py: no such file or folder"
    ]
    # Not repository paths: a URL's path, a dotted module, a path inside another.
    assert path_problems("http://host/mediaflow/x.py, python -m mediaflow.nope, /usr/tests/x") == []
