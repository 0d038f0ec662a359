"""The benchmarks use mediaflow as a user would (issue 26, item 6): a bench module
imports only public names of ``mediaflow``, ``connectors`` and ``devices``.

Public is what a package's ``__init__`` exports in ``__all__`` (``from mediaflow
import FlowSession``, ``from mediaflow.queue import open_queue``); the CLI, the HTTP
API and the documented settings are public too, but a bench reaches those as a user
does (a subprocess, a request, an environment variable), not by importing. A
submodule (``from mediaflow import eventloop``, ``from mediaflow.gc import sweep``)
or a name a package does not export is an internal. A peer measured beside
mediaflow (raw Redis, bare pocketsphinx) is reached through the peer's own client.

``LEFT`` lists the internals some benches still import, each with the reason it
is not yet public; it only shrinks: a new internal import fails, and so does an
entry nothing imports any more.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PRODUCT = ("mediaflow", "connectors", "devices")

# (bench file, internal package) whose modules the file still imports, and why. By
# package, not by name: the parts inside a package move (issue 26 moves many).
LEFT: dict[tuple[str, str], str] = {
    ("bench/capture/children.py", "connectors"): "a microbenchmark of the camera's JPEG "
    "and segment encoders, which no public name or flow isolates",
    ("bench/gc/child.py", "mediaflow.gc"): "times the sweep's steps by wrapping them; "
    "SweepProgress is throttled and has no phase ends",
    ("bench/record/main.py", "connectors"): "a microbenchmark of the recorder's mux "
    "against ffmpeg on the same segments, which no public name isolates",
    ("bench/record/main.py", "mediaflow.nodes"): "the recorder's mux (as above)",
    ("bench/timeline/motion.py", "mediaflow.nodes"): "the motion node's analysis per "
    "frame (decode to grey, background, zones) against ffmpeg's decode of the same "
    "JPEGs, which no public name or flow isolates",
    **{
        (f"bench/speech/{name}.py", "mediaflow.nodes"): "the bare recogniser (the "
        "pipeline's peer) is mediaflow's own pocketsphinx and Whisper wrapper with the "
        "node's defaults; pocketsphinx and faster-whisper driven directly would measure "
        "a different configuration"
        for name in ("engines", "main", "overhead", "whole")
    },
}


def left_for(file: str, what: str) -> str | None:
    """The ``LEFT`` entry that lets ``file`` import ``what``, if any."""
    for (left_file, package), _ in LEFT.items():
        if left_file == file and (
            what == package or what.startswith((package + ".", package + ":"))
        ):
            return package
    return None


@functools.cache
def exported(package: str) -> frozenset[str]:
    """The names ``package``'s ``__init__`` lists in ``__all__`` (empty without one)."""
    init = REPO.joinpath(*package.split("."), "__init__.py")
    if not init.is_file():
        return frozenset()
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return frozenset(ast.literal_eval(node.value))
    return frozenset()


def internal_imports(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each import of a product module or name that is not public.

    ``import mediaflow`` is public; ``import mediaflow.x`` never is (use the
    ``from`` form with a name the package exports). ``from P import n`` is public
    when ``n`` is in ``P.__all__``.
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in PRODUCT and alias.name != top:
                    found.append((node.lineno, alias.name))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] not in PRODUCT:
                continue
            public = exported(node.module)
            for alias in node.names:
                if alias.name not in public:
                    found.append((node.lineno, f"{node.module}:{alias.name}"))
    return found


def bench_imports() -> dict[tuple[str, str], list[int]]:
    seen: dict[tuple[str, str], list[int]] = {}
    for path in sorted((REPO / "bench").rglob("*.py")):
        name = path.relative_to(REPO).as_posix()
        for line, what in internal_imports(path.read_text()):
            seen.setdefault((name, what), []).append(line)
    return seen


def test_bench_imports_only_public_names() -> None:
    seen = bench_imports()
    new = sorted(f"{file}:{lines[0]}: {what}" for (file, what), lines in seen.items()
                 if left_for(file, what) is None)  # fmt: skip
    assert new == [], "bench imports internals; use the public way (see the module docstring)"


def test_left_only_shrinks() -> None:
    used = {(file, left_for(file, what)) for file, what in bench_imports()}
    gone = sorted(f"{file}: {package}" for file, package in LEFT if (file, package) not in used)
    assert gone == [], "no bench imports these any more: take them out of LEFT"


def test_the_check_refuses_internals_and_passes_the_public_api() -> None:
    assert internal_imports("from mediaflow import eventloop\n") == [(1, "mediaflow:eventloop")]
    assert internal_imports("from mediaflow.gc import sweep\n") == [(1, "mediaflow.gc:sweep")]
    assert internal_imports("import mediaflow.queue.redis_lua\n") == [
        (1, "mediaflow.queue.redis_lua")
    ]
    assert internal_imports("from mediaflow.nodes.speech import SpeechNode\n") == [
        (1, "mediaflow.nodes.speech:SpeechNode")
    ]
    assert internal_imports("from connectors._jpeg import X\n") == [(1, "connectors._jpeg:X")]
    assert internal_imports("def f():\n    from mediaflow.config import A\n") == [
        (2, "mediaflow.config:A")
    ]
    public = (
        "import mediaflow\nfrom mediaflow import FlowSession, Node\n"
        "from mediaflow.queue import open_queue\nfrom mediaflow.store import ArtifactStore\n"
        "from . import sibling\nfrom bench._lib.common import Json\nimport redis\n"
    )
    assert internal_imports(public) == []


def test_left_excuses_only_its_file_and_package() -> None:
    assert left_for("bench/gc/child.py", "mediaflow.gc:sweep") == "mediaflow.gc"
    assert left_for("bench/gc/child.py", "mediaflow.gcx:sweep") is None
    assert left_for("bench/gc/child.py", "mediaflow.nodes.speech:SpeechNode") is None
    assert left_for("bench/gc/store.py", "mediaflow.gc:sweep") is None
