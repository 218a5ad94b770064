"""The ids of a tool effect, checked before any SQL on every checkpointer."""

from __future__ import annotations

from .segments import check_id

__all__ = ["check_effect_ids"]


def check_effect_ids(run_id: object, call_id: object, tool_name: object) -> None:
    """The one id rule for an effect's keys: a driver never sees a bad one.

    MariaDB's ``INSERT IGNORE`` would cut an over-long call id to its column,
    so two distinct long ids would be the same effect: refused here instead.
    """
    check_id(run_id, "run_id")
    check_id(call_id, "call_id")
    check_id(tool_name, "tool_name")
