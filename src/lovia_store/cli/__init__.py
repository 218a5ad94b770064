"""The ``lovia-store`` command line: schema upgrades, a readable look at sessions, the demo.

One module per command group (``schema_commands``, ``browse``), the group and its
exit codes in ``app``, everything printed through ``output``.
"""

from __future__ import annotations

from .app import EXIT_CODES, main
from .options import DEFAULT_FILE, default_url
from .transcript import describe

__all__ = ["DEFAULT_FILE", "EXIT_CODES", "default_url", "describe", "main"]
