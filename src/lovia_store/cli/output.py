"""Where the command line prints, and how stored text is made safe to print.

Everything a command prints goes through ``Output``: data on stdout (a rich
console, styled only on a terminal, or one JSON document), messages and the
progress spinner on stderr. Stored content is the user's data, and sometimes a
model's or an attacker's: printed verbatim, an escape sequence in it could
recolour, retitle or rewrite the terminal, so every control character is
written out as an escape first (``printable``).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from rich.console import Console, RenderableType
from rich.segment import Segment, Segments
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


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich's own answer is SystemExit(1), and 1 means "needs upgrade" here.
        self.quiet = True
        raise ReaderGone


class Output:
    """One command's output. ``json_mode`` is set by commands given ``--json``, so that a
    failure is reported as a JSON document too."""

    def __init__(self) -> None:
        self.json_mode = False
        options: dict[str, Any] = {"highlight": False, "markup": False, "emoji": False}
        # Consoles resolve sys.stdout/sys.stderr on each write, so a test's capture works.
        self._out = _Console(soft_wrap=True, **options)
        if not self._out.is_terminal:
            self._out = _Console(soft_wrap=True, width=_UNBOUNDED, **options)
        self._err = _Console(stderr=True, soft_wrap=True, **options)

    def print(self, renderable: RenderableType, *, style: str | None = None) -> None:
        """Print a line or a table on stdout; the caller has made stored text ``printable``."""
        with self._writing():
            self._out.print(renderable, style=style)

    def table(self, table: Table) -> None:
        """Print a table line by line: a reader that leaves early (``| head``) is noticed at
        the next line, and a long listing reaches a pager as it is written."""
        with self._writing():
            for line in self._out.render_lines(table, pad=False, new_lines=False):
                self._out.print(Segments([*line, Segment.line()]))

    def json(self, value: object) -> None:
        with self._writing():
            self._out.file.write(to_json(value) + "\n")
            self._out.file.flush()

    def note(self, text: str) -> None:
        """A message for the person, on stderr (never mixed into the data on stdout)."""
        self._err.print(printable(text, keep="\n\t"))

    @contextlib.contextmanager
    def progress(self, text: str) -> Iterator[None]:
        """A spinner on stderr while slow work runs, shown only when stderr is a terminal."""
        if not self._err.is_terminal:
            yield
            return
        with self._err.status(printable(text), spinner="dots"):
            yield

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        try:
            yield
        except BrokenPipeError as exc:
            raise ReaderGone from exc
