"""``lovia_store.testing``, the shipped contract suites, and tests/divergences.py's hook.

The suites themselves run on every backend in test_session_contract.py and
test_checkpoint_contract.py; here: that they are importable without pytest and not
imported by ``lovia_store``, that they report a broken store, that ``without`` leaves out
exactly the cases that need a missing method, that the pytest classes collect and pass
(docs/testing.md's example, in pytest-asyncio's strict mode), and that a declared
divergence becomes a strict xfail.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from divergences import divergence_of, mark_divergences
from lovia_store import InMemoryCheckpointer, InMemorySession, Segment, TranscriptEntry
from lovia_store.testing import (
    CHECKPOINT_CASES,
    SESSION_CASES,
    check_checkpointer,
    check_session_store,
)

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def test_lovia_store_does_not_import_the_suites_and_they_do_not_need_pytest() -> None:
    probe = (
        "import sys, lovia_store;"
        " print('lovia_store.testing' in sys.modules, 'pytest' in sys.modules)"
    )
    assert _python(probe) == "False False"
    probe = (
        "import sys; from lovia_store.testing import check_session_store, check_checkpointer;"
        " print('pytest' in sys.modules)"
    )
    assert _python(probe) == "False"


def _instances(cases: Any, without: set[str] = set()) -> int:  # noqa: B006 - never mutated
    return sum(len(list(c.instances())) for c in cases if not c.needs & without)


async def test_every_case_passes_on_the_in_memory_stores() -> None:
    assert await check_session_store(InMemorySession) == _instances(SESSION_CASES) == 61
    assert await check_checkpointer(InMemoryCheckpointer) == _instances(CHECKPOINT_CASES) == 25


class ForgetsMeta(InMemorySession):
    """A broken store: it drops every run's meta."""

    async def append(self, session_id: str, entries: Any, **options: Any) -> str:
        options["meta"] = None
        return await super().append(session_id, entries, **options)


class ReversesBatches(InMemoryCheckpointer):
    """A broken checkpointer: each batch is stored backwards."""

    async def append(self, run_id: str, entries: Any, head: Any, **options: Any) -> None:
        await super().append(run_id, list(reversed(list(entries))), head, **options)


async def test_a_broken_store_fails_and_every_failed_case_is_named() -> None:
    with pytest.raises(AssertionError) as raised:
        await check_session_store(ForgetsMeta)
    report = str(raised.value)
    assert re.match(r"\d+ of 61 contract cases failed", report)
    assert "test_meta_is_stored_verbatim_and_never_aliased" in report
    assert "test_round_trips_every_entry_shape" in report
    assert "test_clear" not in report
    with pytest.raises(AssertionError, match="test_load_rebuilds_entries_in_order"):
        await check_checkpointer(ReversesBatches)


class ProtocolOnly:
    """Only the Session protocol's four methods."""

    def __init__(self) -> None:
        self._inner = InMemorySession()

    async def segments(self, session_id: str) -> list[Segment]:
        return await self._inner.segments(session_id)

    async def load(self, session_id: str) -> list[TranscriptEntry]:
        return await self._inner.load(session_id)

    async def append(self, session_id: str, entries: Any, **options: Any) -> str:
        return await self._inner.append(session_id, entries, **options)

    async def clear(self, session_id: str) -> None:
        await self._inner.clear(session_id)


async def test_without_leaves_out_exactly_the_cases_calling_the_missing_methods() -> None:
    missing = {"trim_tool_results", "rewind", "fork", "fork_origin"}
    ran = await check_session_store(ProtocolOnly, without=tuple(missing))
    assert ran == _instances(SESSION_CASES, missing) == 29
    names = {c.name for c in SESSION_CASES if c.needs & missing}
    assert "test_bad_rewind_arguments" in names and "test_clear" not in names
    with pytest.raises(AssertionError, match="AttributeError"):
        await check_session_store(ProtocolOnly)


def test_the_pytest_classes_of_docs_testing_md_collect_and_pass(tmp_path: Path) -> None:
    """The page's pytest example, run by pytest in pytest-asyncio's strict mode."""
    page = (ROOT / "docs" / "testing.md").read_text()
    (example,) = re.findall(r"```py\n(.*?)```", page, re.DOTALL)
    (tmp_path / "test_my_store.py").write_text(example)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # Every session case, and the checkpoint cases that do not need list_runs.
    expected = _instances(SESSION_CASES) + _instances(CHECKPOINT_CASES, {"list_runs"})
    assert f"{expected} passed" in done.stdout


def test_a_divergence_is_matched_by_node_id_pattern() -> None:
    declared = {"tests/test_runner.py::test_x[memory]": "why", "*::test_y[memory*]": "other"}
    assert divergence_of("tests/test_runner.py::test_x[memory]", declared) == "why"
    assert divergence_of("tests/test_runner.py::test_x[sqlite]", declared) is None
    assert divergence_of("tests/a.py::C::test_y[memory-1]", declared) == "other"
    assert divergence_of("tests/a.py::C::test_y[m]", declared) is None  # [..] is no class


class _Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.markers: list[pytest.MarkDecorator] = []

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.markers.append(marker)


def test_the_collection_hook_makes_each_declared_divergence_a_strict_xfail() -> None:
    diverging, same = _Item("tests/t.py::test_y[memory]"), _Item("tests/t.py::test_y[sqlite]")
    mark_divergences([diverging, same], {"*::test_y[memory]": "memory differs"})
    assert same.markers == []
    (marker,) = diverging.markers
    assert marker.name == "xfail"
    assert marker.kwargs == {"reason": "memory differs", "strict": True}
