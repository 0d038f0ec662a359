"""Find the repository paths a Markdown page names that are not in the tree.

The reverse of :mod:`tests.docs_names`' checks, for files: a page that names
``mediaflow/engine/runner.py`` or links ``../bench/README.md`` must name
something that exists, so a file that moves or goes takes its mentions with it.

What counts as a mention: a path that starts at one of the tree's top folders
(:data:`TOP`), anywhere in the text but inside a URL (``mediaflow/engine/``,
``samples/*.toml``), and the target of a relative Markdown link, resolved from
the page's folder. A glob (``*``) or a placeholder (``<flow>``, ``FAMILY``) in a
path matches any name there; the path must still match at least one.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = ("mediaflow", "connectors", "devices", "bench", "tests", "samples", "scripts", "docs")

# A path at the start of a word: not inside a URL, a longer path or a dotted name.
_PATH = re.compile(rf"(?<![\w./:@-])((?:{'|'.join(TOP)})/[\w./*<>{{}}-]*)")
_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
_PLACEHOLDER = re.compile(r"<[^>/]*>|\{[^}/]*\}|\b[A-Z][A-Z_]+[A-Z]\b")


def _exists(path: str, base: Path) -> bool:
    """Whether ``path`` (relative to ``base``) names a file or folder, a glob or a
    placeholder matching at least one."""
    pattern = _PLACEHOLDER.sub("*", path.rstrip("/"))
    if "*" in pattern:
        return any(base.glob(pattern))
    return (base / pattern).exists()


def path_problems(markdown: str, page_dir: Path = ROOT) -> list[str]:
    """One line per repository path or relative link in ``markdown`` that is not in
    the tree. ``page_dir`` is the folder the page's links are relative to."""
    problems = []
    text = re.sub(r"https?://\S+", "", markdown)
    for match in _PATH.finditer(text):
        path = match.group(1).rstrip(".,:;")
        if not _exists(path, ROOT):
            problems.append(f"{path}: no such file or folder")
    for match in _LINK.finditer(markdown):
        target = match.group(1)
        if re.match(r"^[a-z]+:", target):  # http:, mailto: ...
            continue
        if not _exists(target, page_dir):
            problems.append(f"link {target}: no such file or folder")
    return sorted(set(problems))
