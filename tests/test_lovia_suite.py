"""lovia 0.9.119's own test suite, run against our stores on every backend.

``tests/peers/run_lovia_suite.sh`` downloads lovia's sdist from the package
index (a failed download fails this test: CI must prove it) and runs its store,
checkpoint, runner and web-store tests with our stores in place of lovia's. A
test that fails and is not listed in ``tests/peers/lovia_expected_failures.txt``
fails the run, and so does a listed one that passes (strict xfail).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from backends import server_url

PEERS = Path(__file__).resolve().parent / "peers"
SCRIPT = PEERS / "run_lovia_suite.sh"
SERVER_URLS = {"postgres": "LOVIA_TEST_POSTGRES_URL", "mariadb": "LOVIA_TEST_MYSQL_URL"}
# lovia's selected files hold 434 tests and open 569 of our stores; far fewer
# means the selection, or the swap, broke.
AT_LEAST_TESTS = 430
AT_LEAST_STORES = 500
# 12 of them import asyncio: their asyncio.wait_for hang bounds are stretched (lovia_swap).
AT_LEAST_STRETCHED = 12


def expected_list() -> ModuleType:
    """tests/peers/lovia_expected.py, which the plugin imports as a top-level module."""
    spec = importlib.util.spec_from_file_location("lovia_expected", PEERS / "lovia_expected.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_every_private_entry_names_a_port_that_exists() -> None:
    """The list stays honest on its own side too: each private reach names the
    test of ours that checks its property, and that test exists."""
    ours = {
        node.name
        for path in Path(__file__).parent.glob("test_lovia_suite_ports*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef)
    }
    entries = expected_list().read_expected(PEERS / "lovia_expected_failures.txt", "sqlite")
    private = [entry for entry in entries.values() if entry.kind == "private"]
    assert private
    for entry in private:
        named = re.search(r"ported: (\w+)", entry.reason)
        assert named is not None, f"{entry.nodeid} names no port"
        assert named.group(1) in ours, f"{entry.nodeid}: no test {named.group(1)}"


@pytest.fixture(scope="session")
def sdist_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One download per test session, shared by the three backends."""
    return tmp_path_factory.mktemp("lovia-sdist")


def outcome_counts(summary: str) -> dict[str, int]:
    """pytest's last line ('417 passed, 17 xfailed in 58.98s') as counts."""
    return {word: int(number) for number, word in re.findall(r"(\d+) (\w+)", summary)}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mariadb"])
def test_lovia_suite_passes_on_our_stores(backend: str, sdist_cache: Path) -> None:
    if backend in SERVER_URLS:
        server_url(SERVER_URLS[backend])  # skips, or fails under LOVIA_TEST_REQUIRE_SERVERS
    env = {
        # Without this run's own options (--durations=0 would bury a failure's traceback).
        **{k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"},
        "LOVIA_SUITE_BACKEND": backend,
        "LOVIA_SUITE_CACHE": str(sdist_cache),
        "LOVIA_SUITE_PYTHON": sys.executable,
    }
    completed = subprocess.run(
        [str(SCRIPT), "-rfE", "--tb=short", "--log-level=INFO"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-20_000:]
    lines = [line for line in completed.stdout.splitlines() if line.strip()]
    counts = outcome_counts(lines[-1])
    # A listed test that passed failed the run already (strict xfail); one that
    # was skipped, or a selection that lost files, shows in the counts.
    assert counts.get("passed", 0) + counts.get("xfailed", 0) >= AT_LEAST_TESTS, lines[-1]
    assert not counts.get("skipped"), lines[-1]
    opened = re.search(r"lovia-store stores opened: (\d+) on (\w+)", completed.stdout)
    assert opened is not None and opened.group(2) == backend, output[-5_000:]
    assert int(opened.group(1)) >= AT_LEAST_STORES, opened.group(0)
    stretched = re.search(r"hang bounds stretched in (\d+) test modules", completed.stdout)
    assert stretched is not None and int(stretched.group(1)) >= AT_LEAST_STRETCHED, output[-5_000:]
