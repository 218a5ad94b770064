"""ruff and mypy --strict stay clean on the package (part of the one test command), and
its layers import downwards only (docs/architecture.md)."""

from __future__ import annotations

import ast
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


PACKAGE = ROOT / "src" / "lovia_store"
# A package's modules never import the packages listed for it: those sit above it.
# ``models`` (the ORM classes for hosts) is above every one: no store loads sqlalchemy.orm.
ABOVE = {
    "db": ("models", "sessions", "checkpoints", "runs", "integrations", "lifecycle", "cli"),
    "sessions": ("models", "runs", "integrations", "lifecycle", "cli"),
    "checkpoints": ("models", "sessions", "runs", "integrations", "lifecycle", "cli"),
    "runs": ("models", "integrations", "lifecycle", "cli"),
    "integrations": ("models", "lifecycle", "cli"),
    "lifecycle": ("models", "cli"),
}  # migrations/versions import nothing of ours at all: tests/test_frozen_migrations.py


def _imported(path: Path) -> set[str]:
    """The lovia_store subpackages a module imports (``lovia_store.x`` or relative)."""
    package = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                target = [*base, *(node.module.split(".") if node.module else [])]
            else:
                target = (node.module or "").split(".")
            names = [target] if node.module else [[*target, a.name] for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
        else:
            continue
        found |= {name[1] for name in names if len(name) > 1 and name[0] == "lovia_store"}
    return found


def test_layers_import_downwards_only() -> None:
    wrong = []
    for package, above in ABOVE.items():
        for path in sorted((PACKAGE / package).rglob("*.py")):
            names = _imported(path) & set(above)
            wrong += [f"{path.relative_to(PACKAGE)} imports {name}" for name in names]
    assert not wrong, wrong
