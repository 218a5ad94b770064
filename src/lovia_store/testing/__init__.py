"""lovia-store's contract suites, shipped: check any session store or checkpointer.

The cases are the ones lovia-store's own stores pass on every backend. Point them at a
store of your own (or at lovia's or zett-agent's through our integrations) with one import:

- without pytest: ``await check_session_store(make)`` / ``await check_checkpointer(make)``
  run every case on plain asyncio and raise ``AssertionError`` naming each failure;
- with pytest: subclass :class:`SessionContract` / :class:`CheckpointerContract` and give
  them the ``make_session`` / ``make_checkpointer`` fixture (these two need pytest, the
  ``test`` extra; they are imported on first use).

``make`` is a zero-argument callable that opens a new store each call; each case calls
it once and expects an empty store (fresh data per call). Nothing here is
imported by ``lovia_store`` itself. See docs/testing.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ._cases import OPTIONAL_METHODS, Case, a_run, call, every_shape, result, run_cases, say, user
from .checkpoints import CHECKPOINT_CASES
from .session_edits import SESSION_CASES

if TYPE_CHECKING:
    from .contract import CheckpointerContract, SessionContract

__all__ = [
    "CHECKPOINT_CASES",
    "OPTIONAL_METHODS",
    "SESSION_CASES",
    "Case",
    "CheckpointerContract",
    "SessionContract",
    "a_run",
    "call",
    "check_checkpointer",
    "check_session_store",
    "every_shape",
    "result",
    "say",
    "user",
]


async def check_session_store(make: Callable[[], Any], *, without: Sequence[str] = ()) -> int:
    """Run every session case against stores ``make`` opens; returns how many ran."""
    return await run_cases(SESSION_CASES, make, without=without)


async def check_checkpointer(make: Callable[[], Any], *, without: Sequence[str] = ()) -> int:
    """Run every checkpointer case against checkpointers ``make`` opens; returns how many ran."""
    return await run_cases(CHECKPOINT_CASES, make, without=without)


def __getattr__(name: str) -> Any:
    if name in ("SessionContract", "CheckpointerContract"):
        from . import contract  # imports pytest

        return getattr(contract, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
