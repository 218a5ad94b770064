"""ruff and mypy --strict stay clean on the package (part of the one test command)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff() -> None:
    completed = run(str(BIN / "ruff"), "check", "src", "tests")
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_mypy_strict() -> None:
    completed = run(str(BIN / "mypy"))
    assert completed.returncode == 0, completed.stdout + completed.stderr
