"""Whether a node's options fit the types its constructor declares.

A flow file's ``chunk_ms = "fast"`` would otherwise reach the node's
``__init__`` and fail there with Python's own words ("'<' not supported
between instances of 'str' and 'int'"), naming neither node nor option.

Two steps. :func:`rule_for` turns an annotation into a :data:`Rule`, the only
place that deals with :mod:`typing`'s shapes; :func:`fits` and
:func:`describe` decide on rules alone. What the rules know is what a flow
file can say (TOML's strings, numbers, booleans, arrays and tables) plus
paths; an annotation they do not know (a class of the node's own) fits any
value, since a Python caller of :class:`~mediaflow.flows.FlowBuilder` may
pass any object and the checker must never refuse a valid flow.
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Mapping, MutableMapping, MutableSequence, Sequence
from dataclasses import dataclass
from enum import Enum
from numbers import Integral, Real
from pathlib import PurePath
from typing import Any, Literal, Union, assert_never

_SHOWN_CHARS = 60  # a value longer than this is cut in a message: the option names it already


class Plain(Enum):
    """A rule that is one test of the value."""

    ANY = "anything"  # Any, object, or an annotation the rules do not know
    INT = "int"  # an integral number, not a bool
    FLOAT = "float"  # a real number, not a bool
    BOOL = "bool"
    STR = "str"  # a string, or a number: nodes str() a device index
    PATH = "path"  # a string or an os.PathLike
    NONE = "None"
    TABLE = "table"  # any Mapping


@dataclass(frozen=True)
class OneOf:
    """``Literal[...]``: one of these values (of the same type: ``1`` is not ``True``)."""

    values: tuple[object, ...]


@dataclass(frozen=True)
class AnyOf:
    """A union (``X | None``, ``Optional``): fits when a member fits."""

    members: tuple[Rule, ...]


@dataclass(frozen=True)
class ListOf:
    """A list, tuple or sequence: a list or a tuple, each element fitting ``element``
    (``Plain.ANY`` unless the element type is a scalar)."""

    element: Rule


Rule = Plain | OneOf | AnyOf | ListOf

_SCALARS = ((int, Plain.INT), (float, Plain.FLOAT), (bool, Plain.BOOL), (str, Plain.STR))
_ELEMENT_CHECKED = frozenset({Plain.INT, Plain.FLOAT, Plain.BOOL, Plain.STR, Plain.PATH})
_SEQUENCES = (list, tuple, Sequence, MutableSequence)
_MAPPINGS = (dict, Mapping, MutableMapping)


def rule_for(hint: object) -> Rule:
    """The rule for one resolved annotation (as :func:`typing.get_type_hints` gives it)."""
    if hint is Any or hint is object:
        return Plain.ANY
    if hint is None or hint is types.NoneType:
        return Plain.NONE
    origin = typing.get_origin(hint) or hint  # bare ``list`` and ``Sequence`` have none
    args = typing.get_args(hint)
    if origin is Union or origin is types.UnionType:
        members = tuple(rule_for(arg) for arg in args)
        return Plain.ANY if Plain.ANY in members else AnyOf(members)
    if origin is Literal:
        return OneOf(args)
    if any(origin is kind for kind in _SEQUENCES):
        homogeneous = len(args) == 1 or (origin is tuple and len(args) == 2 and args[1] is ...)
        element = rule_for(args[0]) if homogeneous else Plain.ANY
        checked = isinstance(element, Plain) and element in _ELEMENT_CHECKED
        return ListOf(element if checked else Plain.ANY)
    if any(origin is kind for kind in _MAPPINGS):
        return Plain.TABLE
    if origin is os.PathLike or (isinstance(origin, type) and issubclass(origin, PurePath)):
        return Plain.PATH
    return next((rule for kind, rule in _SCALARS if origin is kind), Plain.ANY)


def fits(value: object, rule: Rule) -> bool:
    """Whether ``value`` may be given for an option of ``rule``."""
    match rule:
        case Plain():
            return _fits_plain(value, rule)
        case OneOf(values):
            # Same type first: then ``==`` is a plain comparison (not an array's).
            return any(type(value) is type(v) and value == v for v in values)
        case AnyOf(members):
            return any(fits(value, member) for member in members)
        case ListOf(element):
            return isinstance(value, list | tuple) and all(fits(e, element) for e in value)
        case _:
            assert_never(rule)


def _fits_plain(value: object, rule: Plain) -> bool:
    number = isinstance(value, Real) and not isinstance(value, bool)
    match rule:
        case Plain.ANY:
            return True
        case Plain.INT:
            return isinstance(value, Integral) and not isinstance(value, bool)
        case Plain.FLOAT:
            return number
        case Plain.BOOL:
            return isinstance(value, bool)
        case Plain.STR:
            return isinstance(value, str) or number
        case Plain.PATH:
            return isinstance(value, str | os.PathLike)
        case Plain.NONE:
            return value is None
        case Plain.TABLE:
            return isinstance(value, Mapping)
        case _:
            assert_never(rule)


def describe(rule: Rule) -> str:
    """What ``rule`` asks for, as a message says it: ``int``, ``int or None``,
    ``one of 'a', 'b'``, ``list of int``."""
    match rule:
        case Plain():
            return rule.value
        case OneOf(values):
            return "one of " + ", ".join(map(repr, values))
        case AnyOf(members):
            # None last: "int or None" reads better than "None or int".
            ordered = sorted(members, key=lambda member: member is Plain.NONE)
            return " or ".join(describe(member) for member in ordered)
        case ListOf(element):
            return "list" if element is Plain.ANY else f"list of {describe(element)}"
        case _:
            assert_never(rule)


def option_misfits(node_class: type, options: Mapping[str, Any]) -> list[str]:
    """One message per option whose value does not fit its ``__init__`` annotation,
    in the order given (``option 'chunk_ms' must be int, got 'fast' (str)``).

    Options without an annotation are not checked; nor is any option of a class
    whose annotations cannot be resolved (a name only imported for type checking):
    the constructor is then the only judge, as before.
    """
    try:
        hints = typing.get_type_hints(node_class.__init__)  # type: ignore[misc]
    except Exception:
        return []  # resolving evaluates the annotations: whatever fails, check nothing
    misfits = []
    for name, value in options.items():
        if name not in hints or name == "return":
            continue
        rule = rule_for(hints[name])
        if not fits(value, rule):
            misfits.append(
                f"option {name!r} must be {describe(rule)}, "
                f"got {_shown(value)} ({type(value).__name__})"
            )
    return misfits


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."
