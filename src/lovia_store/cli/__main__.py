"""``python -m lovia_store.cli``: the same as the ``lovia-store`` console script."""

from __future__ import annotations

from .app import main

raise SystemExit(main())
