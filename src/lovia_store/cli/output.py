"""Where the command line prints, and how stored text is made safe to print.

Everything a command prints goes through ``Output``: data on stdout (a rich
console, styled only on a terminal, or one JSON document), messages and the
progress display on stderr. Stored content is the user's data, and sometimes a
model's or an attacker's: printed verbatim, an escape sequence in it could
recolour, retitle or rewrite the terminal, so every control character is
written out as an escape first (``printable``).
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Iterator
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ..db import progress

if TYPE_CHECKING:  # rich is imported when a console is first needed (``Output``)
    from rich.console import Console, RenderableType
    from rich.table import Table

__all__ = ["Output", "ReaderGone", "printable", "to_json"]

# Bidirectional overrides and isolates reorder what a terminal shows ("Trojan Source").
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# C0 and C1 controls (ESC, CSI, OSC, BEL, backspace, carriage return...), DEL, lone
# surrogates (which cannot even be encoded), and the bidi controls.
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f\ud800-\udfff{_BIDI}]")
# In JSON the C0 controls are escaped by the encoder already; these it leaves raw.
_UNSAFE_IN_JSON = re.compile(f"[\x7f-\x9f\ud800-\udfff{_BIDI}]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_UNBOUNDED = 1 << 20  # piped output is never wrapped: a long id stays on its line for grep


def printable(text: str, *, keep: str = "") -> str:
    """``text`` with each control character written as an escape (``\\x1b``, ``\\u202e``),
    except those in ``keep`` (a message's own newlines and tabs)."""
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escape(m), text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def _json_default(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)  # a Path, or an error's detail of any type


def to_json(value: object) -> str:
    """``value`` as JSON that is safe on a terminal and still decodes to the same strings."""
    text = json.dumps(value, ensure_ascii=False, indent=2, default=_json_default)
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class ReaderGone(Exception):
    """Whoever read stdout went away (``lovia-store sessions | head``): stop quietly."""


def _console(**options: Any) -> Console:
    """A rich console that turns a reader gone into ``ReaderGone``; styled only on a
    terminal, and resolving sys.stdout/sys.stderr on each write (a test's capture works)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich's own answer is SystemExit(1), and 1 means "needs upgrade" here.
            self.quiet = True
            raise ReaderGone

    return _Console(highlight=False, markup=False, emoji=False, soft_wrap=True, **options)


class Output:
    """One command's output. ``json_mode`` is set by commands given ``--json``, so that a
    failure is reported as a JSON document too.

    rich (a fifth of a short command's run) is imported only for what needs it: a
    table, a style, a terminal, progress. A line of text or JSON piped out is
    written as it is, which is all rich would write there."""

    def __init__(self) -> None:
        self.json_mode = False

    @cached_property
    def _out(self) -> Console:
        out = _console()
        return out if out.is_terminal else _console(width=_UNBOUNDED)

    @cached_property
    def _err(self) -> Console:
        return _console(stderr=True)

    def print(self, renderable: RenderableType, *, style: str | None = None) -> None:
        """Print a line or a table on stdout; the caller has made stored text ``printable``."""
        with self._writing():
            if isinstance(renderable, str) and style is None and not sys.stdout.isatty():
                sys.stdout.write(renderable + "\n")
                sys.stdout.flush()
            else:
                self._out.print(renderable, style=style)

    def table(self, table: Table) -> None:
        """Print a table line by line: a reader that leaves early (``| head``) is noticed at
        the next line, and a long listing reaches a pager as it is written."""
        from rich.segment import Segment, Segments

        with self._writing():
            for line in self._out.render_lines(table, pad=False, new_lines=False):
                self._out.print(Segments([*line, Segment.line()]))

    def json(self, value: object) -> None:
        with self._writing():
            sys.stdout.write(to_json(value) + "\n")
            sys.stdout.flush()

    def note(self, text: str) -> None:
        """A message for the person, on stderr (never mixed into the data on stdout)."""
        if sys.stderr.isatty():
            self._err.print(printable(text, keep="\n\t"))
        else:
            sys.stderr.write(printable(text, keep="\n\t") + "\n")
            sys.stderr.flush()

    @contextlib.contextmanager
    def progress(self, text: str) -> Iterator[None]:
        """Progress of slow work on stderr, shown only when stderr is a terminal and the
        command does not print JSON: a spinner with ``text``, and a bar for each step
        the work reports (``lovia_store.db.progress``: the revisions an upgrade
        applies, the sessions a conversion converts). The work's reports arrive from
        whichever thread runs it; rich's ``Progress`` takes them under its lock."""
        if self.json_mode or not self._err.is_terminal:
            yield
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TaskID,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.table import Column

        bars = Progress(
            SpinnerColumn("dots"),
            # Half the width at most for a task's name (a long path ends in an ellipsis):
            # the bar and its count stay readable.
            TextColumn(
                "{task.description}",
                table_column=Column(
                    no_wrap=True, overflow="ellipsis", max_width=max(20, self._err.width // 2)
                ),
            ),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self._err,
            transient=True,
        )
        tasks: dict[str, TaskID] = {}

        def report(task: str, done: int, total: int | None) -> None:
            found = tasks.get(task)
            if found is None:
                found = tasks[task] = bars.add_task(printable(task), total=total)
            bars.update(found, completed=done, total=total)

        with bars, progress.reporting(report):
            bars.add_task(printable(text), total=None)
            yield

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        try:
            yield
        except BrokenPipeError as exc:
            raise ReaderGone from exc
