"""Node options against the types their constructor declares.

The rules are a table: an annotation, a value, whether it fits. Then what a
flow says when options do not fit (every misfit at once, naming node and
option), and a constructor's own refusal at start, naming the node. The
command line's exit codes for both: ``tests/test_cli.py``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Optional, Union

import numpy as np
import pytest

from mediaflow import FlowSession
from mediaflow.config import ConfigError
from mediaflow.engine.nodeset import NodeRefusedOptions
from mediaflow.flows import FlowBuilder, FlowError
from mediaflow.flows.option_types import describe, fits, option_misfits, rule_for
from mediaflow.node import Context, Node

if TYPE_CHECKING:
    from mediaflow.queue import WorkQueue  # a name the annotations below cannot resolve


class Gadget:
    """A class of a node's own: the rules do not know it."""


# annotation, value, fits
FITS: list[tuple[object, object, bool]] = [
    (Any, "anything", True),
    (object, [1], True),
    (Gadget, "not a gadget", True),  # unknown: a Python caller may pass any object
    (int, 3, True),
    (int, np.int16(3), True),  # a numbers.Integral
    (int, True, False),  # a bool is no count
    (int, 3.0, False),
    (int, "3", False),
    (float, 2.5, True),
    (float, 2, True),  # an int where a float goes
    (float, np.float32(2.5), True),
    (float, Fraction(1, 2), True),
    (float, False, False),
    (float, "2.5", False),
    (bool, True, True),
    (bool, 1, False),
    (bool, "true", False),
    (str, "default", True),
    (str, 2, True),  # a device index: the connector str()s it
    (str, 2.5, True),
    (str, True, False),
    (str, None, False),
    (Path, "clip.mp4", True),
    (Path, Path("clip.mp4"), True),
    (os.PathLike, Path("clip.mp4"), True),
    (Path, 3, False),
    (Literal["auto", "h264"], "h264", True),
    (Literal["auto", "h264"], "av1", False),
    (Literal[1, 2], True, False),  # True == 1, but it is not one of them
    (Literal[1, 2], 1.0, False),
    (int | None, None, True),
    (int | None, 4, True),
    (int | None, "4", False),
    (Optional[str], None, True),  # noqa: UP045 - the spelling under test
    (Union[int, str], "loose", True),  # noqa: UP007 - the spelling under test
    (int | str, [1], False),
    (Gadget | None, "anything", True),  # a member the rules do not know fits all
    (None, None, True),
    (list[int], [1, 2], True),
    (list[int], (1, 2), True),
    (list[int], [], True),
    (list[int], [1, "2"], False),
    (list[int], [1, True], False),
    (list[int], 1, False),
    (list[float], [1, 2.5], True),
    (Sequence[str], ["a", 1], True),
    (Sequence[str], "ab", False),  # a string is a sequence, but not a list of them
    (tuple[int, ...], [1, 2], True),
    (tuple[int, str], [1, 2], True),  # a fixed shape: elements unchecked
    (list[Gadget], ["anything"], True),
    (list[dict[str, int]], [{"a": "b"}], True),  # only scalar elements are checked
    (list, ["a", 1], True),
    (list, {"a": 1}, False),
    (dict[str, int], {"a": 1}, True),
    (Mapping[str, Any], {}, True),
    (Mapping[str, Any], [("a", 1)], False),
    (dict, "a=1", False),
]


@pytest.mark.parametrize(
    ("hint", "value", "expected"), FITS, ids=[f"{h}-{v!r}" for h, v, _ in FITS]
)
def test_what_fits_an_annotation(hint: object, value: object, expected: bool) -> None:
    assert fits(value, rule_for(hint)) is expected


@pytest.mark.parametrize(
    ("hint", "said"),
    [
        (int, "int"),
        (float, "float"),
        (bool, "bool"),
        (str, "str"),
        (Path, "path"),
        (int | None, "int or None"),
        (None | float, "float or None"),
        (int | str, "int or str"),
        (Literal["a", "b"], "one of 'a', 'b'"),
        (Literal["a"] | None, "one of 'a' or None"),
        (list[int], "list of int"),
        (Sequence[Path], "list of path"),
        (list[Gadget], "list"),
        (dict[str, Any], "table"),
    ],
)
def test_how_a_message_says_the_type(hint: object, said: str) -> None:
    assert describe(rule_for(hint)) == said


class Tuned(Node):
    outputs: ClassVar[Mapping[str, str]] = {"n": "number"}

    def __init__(
        self,
        rate: int = 16000,
        gain: float = 1.0,
        mode: Literal["fast", "slow"] = "fast",
        names: list[str] | None = None,
        gadget: Gadget | None = None,
        free=None,  # no annotation: not checked
    ) -> None:
        self.rate = rate

    async def run(self, ctx: Context) -> None:
        await ctx.emit("n", self.rate)


class Unresolvable(Node):
    outputs: ClassVar[Mapping[str, str]] = {"n": "number"}

    def __init__(self, queue: WorkQueue | None = None, rate: int = 1) -> None:
        self.rate = rate


def test_options_that_fit_are_not_refused() -> None:
    given: dict[str, Any] = {
        "rate": np.int64(8000), "gain": 2, "mode": "slow", "names": ["a", 1],
        "gadget": Gadget(), "free": "x",
    }  # fmt: skip
    assert option_misfits(Tuned, given) == []


def test_every_misfit_is_named_in_order() -> None:
    given = {"gain": "loud", "rate": True, "mode": "medium", "names": [1, None]}
    assert option_misfits(Tuned, given) == [
        "option 'gain' must be float, got 'loud' (str)",
        "option 'rate' must be int, got True (bool)",
        "option 'mode' must be one of 'fast', 'slow', got 'medium' (str)",
        "option 'names' must be list of str or None, got [1, None] (list)",
    ]


def test_a_long_value_is_cut_in_the_message() -> None:
    (message,) = option_misfits(Tuned, {"rate": "x" * 500})
    assert message.startswith("option 'rate' must be int, got 'xxx")
    assert message.endswith("... (str)") and len(message) < 120


def test_a_class_whose_annotations_cannot_be_resolved_is_not_checked() -> None:
    assert option_misfits(Unresolvable, {"rate": "fast"}) == []


def test_a_flow_names_the_node_and_each_option_that_does_not_fit() -> None:
    flow = FlowBuilder("tuned").add("tone", Tuned, rate="fast", gain=[1], mode="slow")
    with pytest.raises(FlowError) as caught:
        flow.build()
    assert str(caught.value).splitlines() == [
        "flow 'tuned': node 'tone': option 'rate' must be int, got 'fast' (str)",
        "flow 'tuned': node 'tone': option 'gain' must be float, got [1] (list)",
    ]
    assert [p.node for p in caught.value.problems] == ["tone", "tone"]


class Picky(Node):
    outputs: ClassVar[Mapping[str, str]] = {"n": "number"}

    def __init__(self, count: int = 1) -> None:
        if count < 1:
            raise ValueError("count must be positive")

    async def run(self, ctx: Context) -> None:
        await ctx.emit("n", 1)


async def test_a_constructor_refusal_at_start_names_the_node(tmp_path: Path) -> None:
    session = FlowSession(FlowBuilder("picky").add("few", Picky, count=0).build(), tmp_path)
    with pytest.raises(NodeRefusedOptions) as caught:
        await session.start()
    assert str(caught.value) == "node 'few' refused its options: count must be positive"
    assert caught.value.node == "few"
    assert isinstance(caught.value, ConfigError)
    assert isinstance(caught.value.__cause__, ValueError)
