"""The docs stay true: their Python examples run, and CI runs the README's test line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def examples() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for index, code in enumerate(BLOCK.findall(page.read_text())):
            found.append((f"{page.name}#{index + 1}", code))
    return found


@pytest.mark.parametrize(("where", "code"), examples(), ids=[w for w, _ in examples()])
def test_example_runs(where: str, code: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(code)
    completed = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, f"{where} failed:\n{completed.stderr}"


def test_every_page_has_examples_or_is_reference() -> None:
    assert len(examples()) >= 5


def test_ci_runs_the_readme_test_line() -> None:
    readme = (ROOT / "README.md").read_text()
    lines = re.findall(r"```sh\n(.*?)\n```", readme, re.DOTALL)
    test_line = next(line for line in lines if "pytest" in line and "venv" in line)
    assert test_line in (ROOT / ".ci" / "run").read_text()


def test_quickstart_runs(tmp_path: Path) -> None:
    """The README's shorter tour of sessions."""
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py"), str(tmp_path / "q.sqlite3")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert "run-2: 4 entries" in completed.stdout


def test_every_test_guarantees_md_names_exists() -> None:
    """docs/guarantees.md links each promise to tests as ``file.py::name``: they exist."""
    page = (ROOT / "docs" / "guarantees.md").read_text()
    named = re.findall(r"`(test_\w+\.py)(?:::(\w+))?`", page)
    assert len(named) >= 40
    for file, test in named:
        source = ROOT / "tests" / file
        assert source.exists(), file
        if test:
            text = source.read_text()
            if "from lovia_store.testing import" in text:
                # The file runs the shipped contract suite: its cases count as its tests.
                shipped = ROOT / "src" / "lovia_store" / "testing"
                text += "".join(p.read_text() for p in sorted(shipped.glob("*.py")))
            defined = re.search(rf"^(async )?def {test}\(", text, re.M)
            assert defined, f"{file}::{test}"


def test_every_path_architecture_md_names_exists() -> None:
    """docs/architecture.md is a map: each module or folder it names is there."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`([\w/{},.]+(?:\.py|/))`", page))
    assert len(named) >= 30
    package = ROOT / "src" / "lovia_store"
    for path in named:
        expanded = [path]
        if "{" in path:  # tests/golden_sql/{sqlite,postgresql,mariadb}/
            head, rest = path.split("{", 1)
            choices, tail = rest.split("}", 1)
            expanded = [head + choice + tail for choice in choices.split(",")]
        for one in expanded:
            assert (package / one).exists() or (ROOT / one).exists(), one
