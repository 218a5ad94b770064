"""Start-up: what a fresh process pays before its first durable write, beside lovia.

A standalone benchmark (not one of W1-W10). Each measurement is a new child process,
lovia-store's and lovia 0.9.119's alternated round by round, on SQLite files in a
temporary folder:

    fresh file     the first ``append`` of a process on a file that does not exist yet
                   (timed inside the process, around that call: the schema it creates)
    existing file  from spawning the process to its exit, which comes right after its
                   first ``append`` to an existing file (imports, the schema check, the write)
    check          ``lovia-store check FILE`` on a tiny current file, spawn to exit

The report gives the median of each side and lovia-store's median over lovia's.

Both sides start from bytecode, as installed wheels do: lovia's ``.pyc`` files were
written when pip installed it, and lovia-store (installed editable) has its package
compiled here first, since an environment with ``PYTHONDONTWRITEBYTECODE`` set would
otherwise have every child compile lovia-store's sources again (tens of ms each).

Usage: ``.venv/bin/python -m bench.startup [--scale tiny|default] [--rounds N] [--output FILE]``;
``bench/run.sh --scale tiny`` runs it once.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROUNDS = {"tiny": 1, "default": 9}

_APPEND = """
import asyncio, sys, time
which, path = sys.argv[1], sys.argv[2]
async def main() -> float:
    if which == "lovia":
        from lovia import SQLiteSession
        from lovia.transcript import InputEntry
        store = SQLiteSession(path)
        entries = [InputEntry(role="user", content="hello")]
        started = time.perf_counter()
        await store.append("u1", entries)
        return time.perf_counter() - started
    from lovia_store import InputEntry, SQLiteSession
    entries = [InputEntry(role="user", content="hello")]
    async with SQLiteSession(path) as store:
        started = time.perf_counter()
        await store.append("u1", entries)
        return time.perf_counter() - started
print(asyncio.run(main()))
"""


def _append(which: str, path: Path) -> tuple[float, float]:
    """(seconds of the first append, seconds from spawn to exit) in a new process."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _APPEND, which, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return float(done.stdout), time.perf_counter() - started


def _check(path: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "lovia_store.cli", "check", str(path)],
        capture_output=True,
        check=True,
        timeout=120,
    )
    return time.perf_counter() - started


def _compile_lovia_store() -> None:
    """Write lovia-store's bytecode, as installing its wheel would (see the docstring)."""
    spec = importlib.util.find_spec("lovia_store")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            compileall.compile_dir(folder, quiet=1)


def measure(rounds: int) -> dict[str, dict[str, list[float]]]:
    _compile_lovia_store()
    found: dict[str, dict[str, list[float]]] = {
        "fresh file, first append (ms)": {"lovia-store": [], "lovia": []},
        "existing file, spawn to first append done (ms)": {"lovia-store": [], "lovia": []},
        "lovia-store check, spawn to exit (ms)": {"lovia-store": []},
    }
    with tempfile.TemporaryDirectory() as folder:
        for n in range(rounds):
            for which, name in (("store", "lovia-store"), ("lovia", "lovia")):
                path = Path(folder) / f"{which}-{n}.sqlite3"
                first, _ = _append(which, path)
                _, whole = _append(which, path)
                found["fresh file, first append (ms)"][name].append(first * 1000)
                found["existing file, spawn to first append done (ms)"][name].append(whole * 1000)
            found["lovia-store check, spawn to exit (ms)"]["lovia-store"].append(
                _check(Path(folder) / f"store-{n}.sqlite3") * 1000
            )
    return found


def report(found: dict[str, dict[str, list[float]]], rounds: int) -> str:
    lines = [
        f"Start-up, {rounds} alternated round(s), a new process each (median ms):",
        "",
        "| measurement | lovia-store | lovia 0.9.119 | ratio |",
        "| --- | --- | --- | --- |",
    ]
    for what, sides in found.items():
        ours = statistics.median(sides["lovia-store"])
        theirs = statistics.median(sides["lovia"]) if "lovia" in sides else None
        shown = "n/a" if theirs is None else f"{theirs:.1f}"
        ratio = "" if theirs is None else f"{ours / theirs:.2f}"
        lines.append(f"| {what} | {ours:.1f} | {shown} | {ratio} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=sorted(ROUNDS), default="default")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    rounds = args.rounds or ROUNDS[args.scale]
    text = report(measure(rounds), rounds)
    print(text)
    if args.output is not None:
        args.output.write_text(text)


if __name__ == "__main__":
    main()
