"""The work queue cut by role: each role of ``WorkQueue`` has its contract
tests, every backend in ``QUEUE_BACKENDS`` plays every role, and the roles stay
small and add up to the whole.

The contract of a role is in ``tests/test_queue_contract_<role>*.py`` (its
``ROLE`` names it): Delivery (``delivery``, ``delivery_commit``), Leases, Gate,
LatestValues (``latest_values``), DeadLetters (``dead_letters``), Inspection and
Retention. Each of those tests runs once per backend (the ``queue`` fixture).
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

from mediaflow.queue import (
    DeadLetters,
    Delivery,
    Gate,
    Inspection,
    LatestValues,
    Leases,
    Retention,
    WorkQueue,
)

ROLES: list[type] = [Delivery, Leases, Gate, LatestValues, DeadLetters, Inspection, Retention]
MAX_METHODS = 10  # issue 26: no protocol in mediaflow/queue with more than 10 methods


def methods(role: type) -> set[str]:
    """The operations a protocol declares itself (not those it inherits)."""
    return {name for name, value in vars(role).items() if inspect.isfunction(value)} - {
        name for name in vars(role) if name.startswith("_")
    }


def snake(role: type) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", role.__name__).lower()


def contract_modules() -> dict[str, type]:
    """Each contract test module and the role it declares."""
    found: dict[str, type] = {}
    for path in sorted(Path(__file__).parent.glob("test_queue_contract_*.py")):
        if path.stem == Path(__file__).stem:
            continue
        module = importlib.import_module(f"tests.{path.stem}")
        found[path.stem] = module.ROLE
    return found


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.__name__)
async def test_every_backend_plays_the_role(queue: WorkQueue, role: type) -> None:
    assert isinstance(queue, role)
    for name in methods(role):
        assert callable(getattr(queue, name)), name


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.__name__)
def test_every_role_has_its_contract_tests(role: type) -> None:
    modules = contract_modules()
    mine = [name for name, declared in modules.items() if declared is role]
    assert mine, f"no tests/test_queue_contract_{snake(role)}.py declares ROLE = {role.__name__}"
    assert all(name.startswith(f"test_queue_contract_{snake(role)}") for name in mine), mine


def test_the_roles_are_small_apart_and_add_up_to_the_work_queue() -> None:
    counts = {role.__name__: len(methods(role)) for role in ROLES}
    assert all(0 < n <= MAX_METHODS for n in counts.values()), counts
    declared = [name for role in ROLES for name in methods(role)]
    assert len(declared) == len(set(declared))  # no operation in two roles
    assert methods(WorkQueue) == {"close"}  # the sum adds nothing but closing
    assert set(WorkQueue.__mro__[1:]) >= set(ROLES)
