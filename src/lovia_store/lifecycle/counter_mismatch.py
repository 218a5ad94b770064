"""``CounterMismatch``: one counter that disagrees with the rows it counts.

Its own module, imported when a mismatch is found: ``lovia-store check`` on a sound
database never loads pydantic for it (``counters``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["CounterMismatch"]


class CounterMismatch(BaseModel):
    """One counter that disagrees with the rows it counts.

    ``table``, ``tenant`` and ``id`` name the row that holds the counter (a session
    in ``lovia_sessions``, a run in ``lovia_run_heads``), ``counter`` the column,
    ``says`` its value and ``holds`` what the rows hold in its terms (a number of
    rows, or the highest sequence, position or version stored: 0 for none).
    ``detail`` says it in words.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    table: str
    id: str
    tenant: str = ""
    counter: str
    says: int
    holds: int
    detail: str

    def __str__(self) -> str:
        return self.detail
