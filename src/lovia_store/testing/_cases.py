"""The machinery of the shipped contract suites: cases, a runner, small entry builders.

A *case* is one ``async def test_...(make, ...)`` function: ``make`` opens a new store (a
zero-argument callable; each case calls it exactly once and expects the store to start
empty), the case opens it with :func:`opened`, exercises it and asserts.
Cases need nothing from pytest; :mod:`lovia_store.testing.contract` turns them into pytest
classes, :func:`run_cases` runs them with plain asyncio.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from lovia_store.entries import (
    AssistantTextEntry,
    FilePart,
    ImagePart,
    InputEntry,
    ReasoningEntry,
    TextPart,
    ToolCallEntry,
    ToolResultEntry,
    TranscriptEntry,
)

CaseFunction = Callable[..., Awaitable[None]]

OPTIONAL_METHODS = frozenset({"trim_tool_results", "rewind", "fork", "fork_origin", "list_runs"})
"""Store methods lovia-store's stores have beyond the ``Session``/``Checkpointer`` protocols."""


@dataclass(frozen=True)
class Case:
    """One contract case, maybe parametrized: ``argnames`` over each tuple of ``values``."""

    function: CaseFunction
    argnames: tuple[str, ...] = ()
    values: tuple[tuple[Any, ...], ...] = ()
    ids: tuple[str, ...] | None = None
    needs: frozenset[str] = field(default_factory=frozenset)
    """Store methods beyond the protocol the case calls (``rewind``, ``list_runs``, ...)."""

    @property
    def name(self) -> str:
        return self.function.__name__

    def instances(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(id, keyword arguments)`` of each run of the case."""
        if not self.argnames:
            yield self.name, {}
            return
        for index, row in enumerate(self.values):
            tag = self.ids[index] if self.ids is not None else str(index)
            yield f"{self.name}[{tag}]", dict(zip(self.argnames, row, strict=True))


def case(
    registry: list[Case],
    *,
    params: tuple[str, Sequence[Any]] | None = None,
    ids: Sequence[str] | None = None,
) -> Callable[[CaseFunction], CaseFunction]:
    """Register a case; ``params=("a, b", [(1, 2), ...])`` as ``pytest.mark.parametrize``.

    The optional store methods it calls (its code's attribute names) are its ``needs``.
    """

    def register(function: CaseFunction) -> CaseFunction:
        argnames: tuple[str, ...] = ()
        values: tuple[tuple[Any, ...], ...] = ()
        if params is not None:
            argnames = tuple(name.strip() for name in params[0].split(","))
            values = tuple(tuple(row) if len(argnames) > 1 else (row,) for row in params[1])
        needs = OPTIONAL_METHODS & set(function.__code__.co_names)
        registry.append(Case(function, argnames, values, tuple(ids) if ids else None, needs))
        return function

    return register


@asynccontextmanager
async def opened(store: Any) -> AsyncIterator[Any]:
    """Open ``store`` as an async context manager if it is one, else close it after if it can."""
    if hasattr(store, "__aenter__"):
        async with store as entered:
            yield entered
        return
    try:
        yield store
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            await close()


class Raised:
    """What :func:`raises` caught."""

    value: BaseException


@contextmanager
def raises(kind: type[BaseException], match: str | None = None) -> Iterator[Raised]:
    """``pytest.raises`` without pytest: the block must raise ``kind``, its text match ``match``."""
    raised = Raised()
    try:
        yield raised
    except kind as error:
        if match is not None and not re.search(match, str(error)):
            raise AssertionError(f"{error!r} does not match {match!r}") from error
        raised.value = error
        return
    raise AssertionError(f"did not raise {kind.__name__}")


async def run_cases(
    cases: Sequence[Case], make: Callable[[], Any], *, without: Sequence[str] = ()
) -> int:
    """Run every case (each instance of a parametrized one) against ``make``.

    ``make`` is called once per case instance and must give an empty store each time.

    Cases that need a method named in ``without`` are left out. Raises ``AssertionError``
    naming every failed case; returns how many ran.
    """
    failures: list[str] = []
    ran = 0
    for each in cases:
        if each.needs & set(without):
            continue
        for name, arguments in each.instances():
            ran += 1
            try:
                await each.function(make, **arguments)
            except Exception as error:  # every failure is reported, not just the first
                failures.append(f"{name}: {type(error).__name__}: {error}")
    if failures:
        raise AssertionError(
            f"{len(failures)} of {ran} contract cases failed:\n" + "\n".join(failures)
        )
    return ran


# -- entry builders -------------------------------------------------------------------------------


def user(text: str) -> InputEntry:
    return InputEntry(role="user", content=text)


def say(text: str) -> AssistantTextEntry:
    return AssistantTextEntry(content=text)


def call(call_id: str, name: str = "lookup", arguments: str = "{}") -> ToolCallEntry:
    return ToolCallEntry(call_id=call_id, name=name, arguments=arguments)


def result(call_id: str, output: str = "ok", *, raw: Any = None) -> ToolResultEntry:
    return ToolResultEntry(call_id=call_id, output=output, raw=raw)


def a_run(tag: str, *, output: str = "ok") -> list[TranscriptEntry]:
    """A four-entry run: question, one tool round trip, answer."""
    return [user(f"q {tag}"), call(f"c-{tag}"), result(f"c-{tag}", output), say(f"a {tag}")]


def every_shape() -> list[TranscriptEntry]:
    """One of every entry type and content part, reasoning metadata, odd unicode."""
    return [
        InputEntry(role="system", content="Be brief. ünïcødé ✓"),
        InputEntry(
            role="user",
            content=[
                TextPart(text="what is on it? 👩‍👩‍👧‍👦"),
                ImagePart(url="https://example.com/a.png", detail="high"),
                ImagePart(data="iVBORw0KGgo=", mime_type="image/png"),
                FilePart(data="JVBERi0=", mime_type="application/pdf", filename="a.pdf"),
            ],
        ),
        ReasoningEntry(
            content="thinking 漢字",
            id="rs_1",
            provider="openai",
            metadata={"encrypted": "gAAA", "n": [1, 2.5, None, True], "nested": {"k": {}}},
        ),
        ToolCallEntry(call_id="call_1", name="look", arguments='{"q": "é", "n": 1}'),
        ToolResultEntry(
            call_id="call_1",
            output="found 𝄞",
            raw={"rows": [1, "two", None], "ok": True},
            is_error=False,
            parts=[TextPart(text="found"), ImagePart(url="https://example.com/b.png")],
        ),
        ToolCallEntry(call_id="call_2", name="fail", arguments="{}"),
        ToolResultEntry(call_id="call_2", output="boom", is_error=True),
        AssistantTextEntry(content="It is a 🦄.", id="msg_1"),
    ]
