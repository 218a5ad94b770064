"""``CheckpointOptions``: how a run is checkpointed and what an existing ``run_id`` means."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from ..checkpoints.contract import Checkpointer, RunSnapshot
from ..checkpoints.leases import DEFAULT_LEASE_TTL, check_ttl
from ..errors import UserError
from ..validation import check_id

__all__ = ["CheckpointOptions", "IfRunExists"]

IfRunExists = Literal["resume", "restart", "fail", "resume_only"]


@dataclass(frozen=True)
class CheckpointOptions:
    """Checkpointing for one run.

    ``run_id`` is the checkpointer's global key and an idempotency key: with
    ``if_run_exists="resume"`` (the default) an interrupted run continues and a
    completed one replays its stored result. ``restart`` discards an existing
    run, ``fail`` refuses it, ``resume_only`` refuses a missing one.
    ``delete_on_success`` drops the snapshot after the run is in the session;
    ``resume_from`` continues from a snapshot the caller obtained.

    ``lease_ttl`` (seconds): with a checkpointer that supports leases, the run
    is held by one worker at a time; a worker silent for longer than this
    (every checkpoint write and a background renewal keep it alive) may be
    taken over. ``None`` turns leases off.
    """

    checkpointer: Checkpointer | None = None
    run_id: str | None = None
    if_run_exists: IfRunExists = "resume"
    delete_on_success: bool = False
    resume_from: RunSnapshot | None = None
    lease_ttl: float | None = DEFAULT_LEASE_TTL

    def __post_init__(self) -> None:
        if self.if_run_exists not in get_args(IfRunExists):
            raise UserError(
                f"if_run_exists must be one of {', '.join(get_args(IfRunExists))}, "
                f"got {self.if_run_exists!r}"
            )
        if self.checkpointer is not None and not isinstance(self.checkpointer, Checkpointer):
            raise UserError(
                f"checkpointer must implement append/load/delete, "
                f"not {type(self.checkpointer).__name__}"
            )
        if self.run_id is not None:
            check_id(self.run_id, "run_id")
        if self.resume_from is not None:
            if not isinstance(self.resume_from, RunSnapshot):
                raise UserError("resume_from must be a RunSnapshot")
            if self.run_id is not None and self.run_id != self.resume_from.run_id:
                raise UserError(
                    f"run_id {self.run_id!r} does not match resume_from's "
                    f"{self.resume_from.run_id!r}"
                )
            if self.if_run_exists in ("restart", "fail"):
                raise UserError(f"resume_from cannot be combined with {self.if_run_exists!r}")
        elif self.checkpointer is None:
            raise UserError("CheckpointOptions needs a checkpointer (or resume_from)")
        elif self.run_id is None:
            # As lovia: a run checkpointed under no id can never be re-issued, so
            # its checkpoint could only ever be orphaned.
            raise UserError(
                "a checkpointer needs the run_id to store the run under "
                "(e.g. uuid4().hex; re-issuing that id is what resumes or replays it)"
            )
        if not isinstance(self.delete_on_success, bool):
            raise UserError("delete_on_success must be a bool")
        if self.delete_on_success and self.checkpointer is None:
            raise UserError("delete_on_success needs a checkpointer to delete the snapshot from")
        if self.lease_ttl is not None:
            check_ttl(self.lease_ttl)

    @property
    def key(self) -> str | None:
        return self.run_id or (self.resume_from.run_id if self.resume_from else None)
