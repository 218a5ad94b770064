"""Where the in-memory stores knowingly differ from the SQL ones: the one map of them.

Each key is a pattern over a test's node id (``file.py::Class::test[backend]``) in which
``*`` stands for any characters and everything else, brackets included, is literal; each
value is the reason. ``conftest.py`` marks every matching test a *strict* xfail: it must
fail, so a divergence that gets fixed (or a pattern that no longer matches what it meant)
shows as an XPASS failure and is removed from here.

Empty today: the session, checkpoint, lease and runner suites pass on ``memory`` as on the
five SQL backends. The Raw Log API has no in-memory store at all; ``Backend.storage()``
skips those tests on ``memory`` instead (nothing to compare).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

DIVERGENCES: dict[str, str] = {}


def divergence_of(nodeid: str, divergences: dict[str, str]) -> str | None:
    """The reason a test is expected to fail on its backend, or None."""
    for pattern, reason in divergences.items():
        wildcard = ".*".join(re.escape(part) for part in pattern.split("*"))
        if re.fullmatch(wildcard, nodeid):
            return reason
    return None


def mark_divergences(items: list[Any], divergences: dict[str, str]) -> None:
    """Make each test a declared divergence matches a strict xfail: it must still fail."""
    for item in items:
        reason = divergence_of(item.nodeid, divergences)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
