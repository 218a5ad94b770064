"""The contract suites as pytest base classes (needs pytest: the ``test`` extra).

Subclass one, give it the factory fixture, and pytest collects every case as a test::

    class TestMyStore(SessionContract):
        @pytest.fixture
        def make_session(self) -> Callable[[], MyStore]:
            return lambda: MyStore(...)

The cases are ``async``: run them with pytest-asyncio (``asyncio_mode = "auto"``; in
strict mode the classes carry ``pytest.mark.asyncio`` already) or anyio's plugin. Set
``without`` to the optional methods the store lacks, e.g. ``("trim_tool_results",
"rewind")``: the cases calling them are not generated.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import pytest

from ._cases import Case
from .checkpoints import CHECKPOINT_CASES
from .session_edits import SESSION_CASES

try:  # mark the cases for pytest-asyncio's strict mode when it is installed
    import pytest_asyncio  # noqa: F401

    _ASYNC_MARKS: list[pytest.MarkDecorator] = [pytest.mark.asyncio]
except ImportError:  # pragma: no cover - another async plugin runs them
    _ASYNC_MARKS = []


def _method(each: Case, fixture: str) -> Callable[..., Any]:
    async def test(self: Any, **arguments: Any) -> None:
        await each.function(arguments.pop(fixture), **arguments)

    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    parameters += [inspect.Parameter(name, keyword) for name in (fixture, *each.argnames)]
    test.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    test.__name__ = test.__qualname__ = each.name
    test.__doc__ = each.function.__doc__
    test.__module__ = each.function.__module__
    marked: Callable[..., Any] = test
    if each.argnames:
        marked = pytest.mark.parametrize(
            ",".join(each.argnames),
            [row if len(row) > 1 else row[0] for row in each.values],
            ids=list(each.ids) if each.ids is not None else None,
        )(marked)
    for mark in _ASYNC_MARKS:
        marked = mark(marked)
    return marked


class _Contract:
    cases: ClassVar[Sequence[Case]] = ()
    fixture: ClassVar[str] = ""
    without: ClassVar[Sequence[str]] = ()
    """Optional store methods the store under test lacks; cases calling them are left out."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for each in cls.cases:
            if each.name in cls.__dict__:
                continue  # the subclass wrote its own version of this case
            if each.needs & set(cls.without):
                setattr(cls, each.name, None)  # hides the inherited test
            else:
                setattr(cls, each.name, _method(each, cls.fixture))


class SessionContract(_Contract):
    """Every session case as a test; the subclass provides the ``make_session`` fixture.

    ``make_session`` returns a zero-argument callable that opens a new session store
    (an async context manager, or an object with an async ``close``); each case calls it
    once and expects an empty store.
    """

    cases = SESSION_CASES
    fixture = "make_session"


class CheckpointerContract(_Contract):
    """Every checkpointer case as a test; the subclass provides ``make_checkpointer``."""

    cases = CHECKPOINT_CASES
    fixture = "make_checkpointer"
