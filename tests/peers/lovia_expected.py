"""The list of lovia's tests that do not run as-is on our stores, and why.

Each line of ``lovia_expected_failures.txt`` is ``kind | test id | backends | reason``:

- ``private``: the test reaches into lovia's private helpers, its table names
  or raw ``sqlite3`` on its files. It runs on our stores as a strict xfail (one
  that starts to pass fails the run); the property it checks is ported to our
  tables in ``tests/test_lovia_suite_ports.py``.
- ``timing``: the test races a request against a run and wins only while the
  store never yields to the event loop (lovia's in-memory stores); lovia's own
  ``SQLiteSession``/``SQLiteCheckpointer`` lose the same race, some always,
  some now and then, and so do its in-memory stores slowed down. It runs on
  lovia's in-memory stores, so it still checks what it is about (the web
  supervisor), not a store.

``backends`` is ``all`` or a comma-separated subset of sqlite, postgres, mariadb.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

KINDS = ("private", "timing")
BACKENDS = ("sqlite", "postgres", "mariadb")


@dataclass(frozen=True)
class Expected:
    kind: str
    nodeid: str
    reason: str


class ListError(ValueError):
    """A line of the list is malformed (raised as a usage error by the plugin)."""


def read_expected(path: Path, backend: str) -> dict[str, Expected]:
    """The entries of ``path`` that apply to ``backend``, by test id."""
    found: dict[str, Expected] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = [field.strip() for field in line.split(" | ", 3)]
        if len(fields) != 4 or not all(fields):
            raise ListError(f"{path}:{number}: expected 'kind | test id | backends | reason'")
        kind, nodeid, backends, reason = fields
        chosen = {name.strip() for name in backends.split(",")}
        if kind not in KINDS:
            raise ListError(f"{path}:{number}: kind {kind!r} is not one of {KINDS}")
        if chosen - {"all", *BACKENDS}:
            raise ListError(f"{path}:{number}: unknown backends {sorted(chosen - set(BACKENDS))}")
        if nodeid in found:
            raise ListError(f"{path}:{number}: {nodeid} is listed twice")
        if "all" in chosen or backend in chosen:
            found[nodeid] = Expected(kind, nodeid, reason)
    return found
