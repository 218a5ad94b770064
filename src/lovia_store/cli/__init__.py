"""The ``lovia-store`` command line: schema upgrades, a readable look at sessions, the demo.

One module per command group (``schema_commands``, ``browse``), the group and its
exit codes in ``app``, everything printed through ``output``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .app import EXIT_CODES, main
from .options import DEFAULT_FILE, default_url

if TYPE_CHECKING:
    from .transcript import describe

__all__ = ["DEFAULT_FILE", "EXIT_CODES", "default_url", "describe", "main"]


def __getattr__(name: str) -> Any:
    """``describe`` on first use: it loads the entry models, which ``check`` never needs."""
    if name == "describe":
        from .transcript import describe

        return describe
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
