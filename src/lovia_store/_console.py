"""The ``lovia-store`` console script.

It loads the command line itself, so that Ctrl-C while the libraries load ends the
command as quietly as Ctrl-C while it runs, not with an ``ImportError`` traceback
half-way through SQLAlchemy.
"""

from __future__ import annotations

import signal
import sys

_INTERRUPTED = 128 + signal.SIGINT  # as lovia_store.cli.app.INTERRUPTED


def main() -> int:
    try:
        from .cli.app import main as run
    except KeyboardInterrupt:
        print("lovia-store: interrupted", file=sys.stderr)
        return _INTERRUPTED
    return run()
