"""Find the flow keys, commands, flags and HTTP routes a Markdown page names.

The docs checker of ``tests/test_docs_names.py``. Each ``*_problems`` function
takes Markdown text and answers one line per name it mentions that does not
exist, judged against the live objects, never against source text:

- flow keys against the flow loader's key sets and the options the validator
  binds (:func:`mediaflow.flows.node_checks.bind_options`) on the node classes;
- commands and flags against the parser behind the ``mediaflow`` console
  script, built, not read;
- routes against the router of the aiohttp app the server builds.

What counts as a mention: code spans and fenced blocks only. A code span
``key = value`` that parses as TOML names a flow key; a ``toml`` block names
every key of its ``[flow]`` and ``[[node]]`` tables; ``mediaflow CMD ...``
(or ``./scripts/demo ...``) in a span or a block line names a command and its
flags; a span that is a flag (``--watch``) names a flag of some command; a
span ``METHOD /path``, ``/path`` or ``…/suffix``, or an ``http://`` URL in code,
names a route.
"""

from __future__ import annotations

import argparse
import inspect
import re
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import import_module
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from mediaflow.flows import registry
from mediaflow.flows.load import FLOW_KEYS, NODE_KEYS
from mediaflow.flows.node_checks import NodeProblem, bind_options
from mediaflow.node import Node

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
METHODS = ("GET", "HEAD", "PUT", "POST", "DELETE", "PATCH")
# Absolute paths in the docs that are files or devices, not routes.
NOT_ROUTES = ("/dev/", "/sys/", "/dev", "/sys")

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
_SPAN = re.compile(r"`([^`\n]+)`")
_ASSIGNMENT = re.compile(r"^([a-z_][a-z0-9_]*)\s*=\s*\S")
_COMMAND = re.compile(r"(?:^|(?<=[\s$]))(?:mediaflow|\./scripts/demo)\b(?=\s|$)(.*)")
_URL = re.compile(r"https?://[\w.-]+(?::\d+)?(/[^\s'\"`)]*)")
_ROUTE = re.compile(rf"^(?:({'|'.join(METHODS)})\s+)?(…?/\S*)$")


@dataclass(frozen=True)
class Code:
    """Markdown code: ``spans`` grouped by source line, and fenced ``blocks``."""

    span_lines: list[list[str]]
    blocks: list[tuple[str, str]]


def read_code(markdown: str) -> Code:
    """Split ``markdown`` into its fenced blocks (language, body) and its spans."""
    blocks = [(m.group(1), m.group(2)) for m in _FENCE.finditer(markdown)]
    prose = _FENCE.sub("", markdown)
    lines = [[s.replace("\\|", "|") for s in _SPAN.findall(line)] for line in prose.splitlines()]
    return Code([spans for spans in lines if spans], blocks)


# -- flow keys ---------------------------------------------------------------------


def _builtin_classes() -> dict[str, type[Node]]:
    classes: dict[str, type[Node]] = {}
    for name in registry.node_names():
        classes[name] = _imported(registry.node_target(name))
    for name in registry.connector_names():
        classes[name] = _imported(registry.connector_target(name))
    return classes


def _imported(target: str | None) -> type[Node]:
    assert target is not None
    node_class = registry.import_target(target, SAMPLES)
    assert isinstance(node_class, type)
    return node_class


def _binds(node_class: type[Node], key: str) -> bool:
    """Whether the validator binds option ``key`` on ``node_class`` (others filled)."""
    required = {
        p.name: None
        for p in inspect.signature(node_class).parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    }
    try:
        bind_options(node_class, {**required, key: None})
    except NodeProblem:  # the key is not an option of this class
        return False
    return True


def _node_key_problem(key: str, value: object, node_class: type[Node] | None) -> str | None:
    if key in NODE_KEYS:
        if key in ("use", "connector") and isinstance(value, str) and ":" not in value:
            names = registry.node_names() if key == "use" else registry.connector_names()
            if value not in names:
                return f"flow key {key} = {value!r}: no built-in {key} named {value!r}"
        return None
    candidates = [node_class] if node_class else list(_builtin_classes().values())
    if any(_binds(c, key) for c in candidates):
        return None
    where = node_class.__name__ if node_class else "any [flow], [[node]] or built-in node"
    return f"flow key {key!r}: not accepted by {where}"


def _block_node_class(table: Mapping[str, Any]) -> type[Node] | None:
    for key, names, target in (
        ("use", registry.node_names(), registry.node_target),
        ("connector", registry.connector_names(), registry.connector_target),
    ):
        value = table.get(key)
        if isinstance(value, str):
            if value in names:
                return _imported(target(value))
            if ":" in value and "package.module" not in value:
                return _imported(value)
    return None


def flow_key_problems(markdown: str) -> list[str]:
    """Flow keys named in ``markdown`` that the flow validator does not accept."""
    code = read_code(markdown)
    problems: list[str] = []
    for spans in code.span_lines:
        for span in spans:
            if not _ASSIGNMENT.match(span):
                continue
            try:
                parsed = tomllib.loads(span)
            except tomllib.TOMLDecodeError:
                continue  # Python (`ordered = False`) or a shell setting, not TOML
            for key, value in parsed.items():
                if key in FLOW_KEYS:
                    continue
                problem = _node_key_problem(key, value, None)
                if problem:
                    problems.append(problem)
    for language, body in code.blocks:
        if language == "toml":
            problems.extend(_toml_block_problems(tomllib.loads(body)))
    for key in _option_table_keys(markdown):
        problem = _node_key_problem(key, None, None)
        if problem:
            problems.append(problem)
    return problems


def _option_table_keys(markdown: str) -> Iterator[str]:
    """The first-column names of tables headed ``| option |``."""
    in_table = False
    for line in markdown.splitlines():
        if re.match(r"\|\s*option\s*\|", line):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table:
            first = line.split("|")[1]
            yield from re.findall(r"`([a-z_][a-z0-9_]*)`", first)


def _toml_block_problems(data: Mapping[str, Any]) -> Iterator[str]:
    for key in data:
        if key not in ("flow", "node"):
            yield f"flow key {key!r}: not a top-level table of a flow file"
    for key in data.get("flow", {}):
        if key not in FLOW_KEYS:
            yield f"flow key [flow] {key!r}: not accepted"
    for table in data.get("node", []):
        node_class = _block_node_class(table)
        for key, value in table.items():
            problem = _node_key_problem(key, value, node_class)
            if problem:
                yield problem


# -- commands and flags ------------------------------------------------------------


def console_parser() -> argparse.ArgumentParser:
    """The parser of the ``mediaflow`` console script, through its entry point's module."""
    (entry,) = entry_points(group="console_scripts", name="mediaflow")
    module = import_module(entry.module)
    build: Callable[[], argparse.ArgumentParser] = module.build_parser
    return build()


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(parser: argparse.ArgumentParser) -> dict[str, bool]:
    """Each option string of ``parser`` and whether it takes a value."""
    return {o: a.nargs != 0 for a in parser._actions for o in a.option_strings}


def _flag_known(flag: str, flags: Mapping[str, bool]) -> bool:
    name = flag.split("=")[0]
    if name in flags:
        return True
    # -vv: repeated short flags
    return bool(re.fullmatch(r"-[a-z]+", name)) and all(f"-{c}" in flags for c in name[1:])


def _command_problems(text: str, parser: argparse.ArgumentParser) -> list[str]:
    match = _COMMAND.search(text)
    if match is None:
        return []
    rest = text[match.start() :]
    command_word = "demo" if rest.startswith("./scripts/demo") else None
    words = match.group(1).strip()
    if command_word is None:
        if not words:
            return []
        command_word, _, words = words.partition(" ")
    tokens = re.sub(r"[\[\]|\\]", " ", words).split()
    commands = _subcommands(parser)
    if command_word not in commands:
        return [f"command `mediaflow {command_word}`: no such command"]
    command = commands[command_word]
    actions = _subcommands(command)
    named = [t for t in tokens if t in actions]
    flags = {**_flags(parser), **_flags(command)}
    for action in named or actions:
        flags.update(_flags(actions[action]))
    problems = [
        f"flag {token.split('=')[0]} of `mediaflow {command_word}`: none"
        for token in tokens
        if token.startswith("-") and not _flag_known(token, flags)
    ]
    for action in _named_actions(words) if actions else []:
        if action not in actions:
            problems.append(f"command `mediaflow {command_word} {action}`: no such action")
    return problems


def _named_actions(words: str) -> list[str]:
    """The action a command line names: its first word, or ``[a | b]``'s choices."""
    words = words.replace("\\|", "|").strip()
    alternatives = re.match(r"\[([a-z][a-z| -]*)\]", words)
    if alternatives:
        return [w.strip() for w in alternatives.group(1).split("|")]
    first = words.split()[0] if words.split() else ""
    return [first] if re.fullmatch(r"[a-z][a-z-]*", first) else []


def cli_problems(markdown: str, parser: argparse.ArgumentParser | None = None) -> list[str]:
    """Commands and flags named in ``markdown`` that the ``mediaflow`` parser lacks."""
    parser = parser or console_parser()
    every_flag: dict[str, bool] = dict(_flags(parser))
    for command in _subcommands(parser).values():
        every_flag.update(_flags(command))
        for action in _subcommands(command).values():
            every_flag.update(_flags(action))
    code = read_code(markdown)
    problems: list[str] = []
    for spans in code.span_lines:
        for span in spans:
            if re.fullmatch(r"--?[a-z][\w-]*(?:[ =]\S+)?", span):
                if not _flag_known(span.split()[0], every_flag):
                    problems.append(f"flag {span.split()[0]}: no command has it")
            else:
                problems.extend(_command_problems(span, parser))
    for language, body in code.blocks:
        if language in ("", "sh", "console", "bash"):
            for line in body.splitlines():
                problems.extend(_command_problems(re.split(r"\s#", line)[0], parser))
    return problems


# -- routes ------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # the canonical path, ``{name}`` for a variable part

    def matches(self, path: str) -> bool:
        pattern = re.escape(self.path)
        pattern = re.sub(r"\\\{\w+\\\}", "[^/]+", pattern)
        return re.fullmatch(pattern, path) is not None

    def ends_with(self, suffix: str) -> bool:
        return _plain(self.path).endswith(_plain(suffix))


def _plain(path: str) -> str:
    return re.sub(r"\{\w+\}", "{}", path)


def _concrete(path: str) -> str:
    return re.sub(r"\{\w+\}", "X", path).split("?")[0].split("#")[0]


def _route_known(method: str | None, path: str, routes: list[Route], suffix: bool) -> bool:
    def method_ok(route: Route) -> bool:
        return method is None or route.method == method

    if suffix:
        return any(method_ok(r) and r.ends_with(path.lstrip("…")) for r in routes)
    return any(method_ok(r) and r.matches(_concrete(path)) for r in routes)


def route_problems(markdown: str, routes: list[Route]) -> list[str]:
    """Routes named in ``markdown`` that the app's router does not have."""
    code = read_code(markdown)
    problems: list[str] = []
    for spans in code.span_lines:
        seen_route = False
        for span in spans:
            for url in _URL.finditer(span):
                if not _route_known(None, url.group(1), routes, suffix=False):
                    problems.append(f"route {url.group(1)}: not served")
            match = _ROUTE.match(span)
            if match is None or span.startswith(NOT_ROUTES):
                continue
            method, path = match.group(1), match.group(2).rstrip(".,")
            full = _route_known(method, path, routes, suffix=False)
            # `POST /api/flows/{flow}/pause`, `/resume`: the rest of the row are suffixes.
            continued = (path.startswith("…") or seen_route) and _route_known(
                method, path, routes, suffix=True
            )
            if not (full or continued):
                problems.append(f"route {method or 'any'} {path}: not served")
            seen_route = True
    for _language, body in code.blocks:
        for url in _URL.finditer(body):
            if not _route_known(None, url.group(1), routes, suffix=False):
                problems.append(f"route {url.group(1)}: not served")
    return problems


def doc_pages() -> list[Path]:
    """The README and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


# -- the node contract -------------------------------------------------------------


def context_problems(markdown: str) -> list[str]:
    """``ctx.name`` mentions in ``markdown`` that :class:`mediaflow.Context` lacks."""
    from mediaflow import Context

    members = set(dir(Context))
    for klass in Context.__mro__:
        members.update(getattr(klass, "__annotations__", {}))
    code = read_code(markdown)
    texts = [span for spans in code.span_lines for span in spans]
    texts += [body for language, body in code.blocks if language == "python"]
    named = {name for text in texts for name in re.findall(r"\bctx\.([A-Za-z_]\w*)", text)}
    return [f"ctx.{name}: Context has no such member" for name in sorted(named - members)]


# -- benchmarks --------------------------------------------------------------------


def bench_problems(markdown: str) -> list[str]:
    """``python -m bench.x`` commands in ``markdown`` whose module does not run."""
    from importlib.util import find_spec

    named = set(re.findall(r"python -m (bench(?:\.\w+)+)", markdown))
    runnable = {
        name
        for name in named
        if (spec := find_spec(name)) is not None
        and (spec.submodule_search_locations is None or find_spec(f"{name}.__main__"))
    }
    return [f"`python -m {name}`: no such runnable module" for name in sorted(named - runnable)]
