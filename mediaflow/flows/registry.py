"""Names a flow file may use instead of an import string.

``use = "speech"`` and ``connector = "camera"`` are looked up here and turned
into ``"module:Class"`` import strings; nothing is imported until a flow
actually names it, so a missing optional dependency only hurts the flows that
need it. This is also the only way the engine reaches ``connectors``: by
import string, never by an ``import`` statement.

Lookup order: names registered at run time with :func:`register_node` /
:func:`register_connector`, then the built-ins below, then installed
distributions' entry points in the ``mediaflow.nodes`` /
``mediaflow.connectors`` groups (an entry point's value is its import string).
"""

from __future__ import annotations

import importlib
import re
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import entry_points
from pathlib import Path
from types import MappingProxyType

NODE_GROUP = "mediaflow.nodes"
CONNECTOR_GROUP = "mediaflow.connectors"

BUILTIN_NODES: Mapping[str, str] = MappingProxyType(
    {
        "speech": "mediaflow.nodes.speech:SpeechNode",
        "recorder": "mediaflow.nodes.recorder:RecorderNode",
        "timer": "mediaflow.nodes.timer:TimerNode",
        "motion": "mediaflow.nodes.motion:MotionNode",
        "loudness": "mediaflow.nodes.loudness:LoudnessNode",
        "mqtt": "mediaflow.nodes.mqtt:MqttNode",
        "webhook": "mediaflow.nodes.webhook:WebhookNode",
    }
)
BUILTIN_CONNECTORS: Mapping[str, str] = MappingProxyType(
    {
        "camera": "connectors.camera:CameraConnector",
        "microphone": "connectors.microphone:MicrophoneConnector",
        "file": "connectors.file:FileConnector",
        "url": "connectors.url:UrlConnector",
        "webrtc": "connectors.webrtc:WebRTCConnector",
    }
)

_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
TARGET_RE = re.compile(rf"^({_DOTTED}):({_DOTTED})$")

# sys.path is process-wide: two flows loading in two threads must not
# interleave their insert/remove.
_SYS_PATH_LOCK = threading.Lock()

_registered_nodes: dict[str, str] = {}
_registered_connectors: dict[str, str] = {}


def _register(
    table: dict[str, str], builtins: Mapping[str, str], what: str, name: str, target: str
) -> None:
    if TARGET_RE.match(target) is None:
        raise ValueError(f"{what} {name!r}: {target!r} is not a 'package.module:Class' string")
    # Silently replacing a name would make a flow file mean different things
    # depending on import order; refuse instead.
    current = table.get(name, builtins.get(name))
    if current is not None and current != target:
        raise ValueError(f"{what} {name!r} is already registered as {current!r}")
    table[name] = target


def register_node(name: str, target: str) -> None:
    """Let flows write ``use = name`` for the node class at ``target`` ("module:Class").

    Nothing is imported now. Raises ``ValueError`` for a malformed target or a
    name already taken by a different target (registering the same pair again
    is a no-op).
    """
    _register(_registered_nodes, BUILTIN_NODES, "node", name, target)


def register_connector(name: str, target: str) -> None:
    """Let flows write ``connector = name`` for the class at ``target``.

    Same rules as :func:`register_node`.
    """
    _register(_registered_connectors, BUILTIN_CONNECTORS, "connector", name, target)


def _entry_point_targets(group: str) -> dict[str, str]:
    # Read on every miss rather than cached: it costs a few milliseconds, only
    # when a flow is loaded, and a package installed meanwhile is then seen.
    return {ep.name: ep.value for ep in entry_points(group=group)}


def node_target(name: str) -> str | None:
    """The import string for node name ``name``, or ``None`` if nobody defines it."""
    if name in _registered_nodes:
        return _registered_nodes[name]
    if name in BUILTIN_NODES:
        return BUILTIN_NODES[name]
    return _entry_point_targets(NODE_GROUP).get(name)


def connector_target(name: str) -> str | None:
    """The import string for connector name ``name``, or ``None`` if nobody defines it."""
    if name in _registered_connectors:
        return _registered_connectors[name]
    if name in BUILTIN_CONNECTORS:
        return BUILTIN_CONNECTORS[name]
    return _entry_point_targets(CONNECTOR_GROUP).get(name)


def is_builtin(name: str) -> bool:
    """True when ``name`` is one of mediaflow's own nodes or connectors (not a plug-in)."""
    return name in BUILTIN_NODES or name in BUILTIN_CONNECTORS


def builtin_name(node_class: type) -> str | None:
    """The built-in name (``"motion"``, ``"camera"``) of ``node_class``, or None for
    a class of the user's own (a subclass of a built-in included)."""
    target = f"{node_class.__module__}:{node_class.__qualname__}"
    for table in (BUILTIN_NODES, BUILTIN_CONNECTORS):
        for name, builtin in table.items():
            if builtin == target:
                return name
    return None


def node_names() -> list[str]:
    """Every node name a flow may ``use``, sorted."""
    return sorted({*_registered_nodes, *BUILTIN_NODES, *_entry_point_targets(NODE_GROUP)})


def connector_names() -> list[str]:
    """Every connector name a flow may use, sorted."""
    return sorted(
        {*_registered_connectors, *BUILTIN_CONNECTORS, *_entry_point_targets(CONNECTOR_GROUP)}
    )


class TargetImportError(Exception):
    """An import string could not be imported; the message says why (no subject)."""


def import_target(import_string: str, search_dir: Path | None = None) -> object:
    """Import ``"package.module:Attr"`` and return the attribute (``Attr`` may be dotted).

    With ``search_dir``, that directory is first on ``sys.path`` during the
    import (a module next to a flow file). Runs the module's top-level code.
    Raises :class:`TargetImportError` for a malformed string, a missing
    module or attribute, or a module that raises while being imported.
    """
    match = TARGET_RE.match(import_string)
    if match is None:
        raise TargetImportError(f"{import_string!r} is not a 'package.module:Class' string")
    module_name, attr_path = match.group(1), match.group(2)
    if search_dir is not None:
        _refuse_shadowed(module_name, search_dir)
    try:
        with _search_path(search_dir):
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TargetImportError(str(exc)) from exc
    except Exception as exc:
        # A module that raises at import is a broken flow, not a crash of the
        # loader; the traceback stays on __cause__ for whoever wants it.
        raise TargetImportError(
            f"importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    obj: object = module
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetImportError(
                f"module {module_name!r} has no attribute {attr_path!r}"
            ) from None
    return obj


def _refuse_shadowed(module_name: str, search_dir: Path) -> None:
    """Refuse a module next to the flow that a same-named, already imported one hides.

    ``sys.modules`` is keyed by name: once any ``nodes`` is imported, every
    later ``nodes:X`` gets that one, whatever directory the flow is in.
    Loading the wrong class silently would be worse than a clear error.
    """
    top = module_name.split(".", 1)[0]
    loaded = sys.modules.get(top)
    beside = search_dir / f"{top}.py", search_dir / top / "__init__.py"
    if loaded is None or not any(path.is_file() for path in beside):
        return
    origin = getattr(loaded, "__file__", None)
    if origin is None or Path(origin).resolve().parent not in {
        search_dir.resolve(),
        (search_dir / top).resolve(),
    }:
        raise TargetImportError(
            f"module {top!r} next to the flow file is hidden by the {top!r} already imported "
            f"from {origin or 'a built-in'}; rename the module next to the flow"
        )


@contextmanager
def _search_path(directory: Path | None) -> Iterator[None]:
    """Put ``directory`` first on ``sys.path`` while the body runs."""
    if directory is None:
        yield
        return
    entry = str(directory)
    with _SYS_PATH_LOCK:
        sys.path.insert(0, entry)
        # The import system caches directory listings; a module written since
        # the last import from this directory must still be found.
        importlib.invalidate_caches()
        try:
            yield
        finally:
            if entry in sys.path:
                sys.path.remove(entry)
