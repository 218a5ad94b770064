"""Progress of long work (migrations, conversions), for whoever asked to hear it.

The library prints nothing: a migration reports each step to the reporter the
caller set with ``reporting()`` (the ``lovia-store upgrade`` command draws a
progress bar from it), and to nobody otherwise. The reporter lives in a
context variable, so it reaches the migration wherever it runs: in the
caller's task on a server, in the SQLite writer thread (whose jobs run in
their caller's context). It is called from that thread: it must be quick and
thread-safe (rich's ``Progress`` is).

A report is ``(task, done, total)``: ``"schema revisions"`` counts the
revisions an upgrade applies; a conversion counts what it converts (``"lovia
0.9 sessions"``, ``"zett-agent sessions"``, ...), ``total`` None where it is
not known beforehand. Migrations reach the reporter through Alembic's
``config.attributes["lovia_store.progress"]`` (revisions import nothing from
lovia_store), which the upgrade sets.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

__all__ = ["ALEMBIC_ATTRIBUTE", "Reporter", "current", "reporting"]

Reporter = Callable[[str, int, "int | None"], None]
"""``reporter(task, done, total)``."""

ALEMBIC_ATTRIBUTE = "lovia_store.progress"
"""Where a migration finds the reporter: ``context.config.attributes``."""

_REPORTER: ContextVar[Reporter | None] = ContextVar("lovia_store_progress", default=None)


@contextlib.contextmanager
def reporting(reporter: Reporter) -> Iterator[None]:
    """Send the progress of work started inside this block to ``reporter``."""
    token = _REPORTER.set(reporter)
    try:
        yield
    finally:
        _REPORTER.reset(token)


def current() -> Reporter | None:
    """The reporter work started now reports to, if any."""
    return _REPORTER.get()
