"""What a workload is: metrics it reports and an async body run inside one trial."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from uuid import uuid4

from bench.backends import Backend, BackendSpec, TrialContext
from bench.config import Scale


@dataclass(frozen=True)
class Metric:
    """One number a workload reports; ``higher_is_better`` orients the ratios."""

    key: str
    label: str
    higher_is_better: bool
    digits: int = 1
    ratio: bool = True  # False for counts (failures), where a ratio means nothing


@dataclass
class TrialEnv:
    """Everything a workload body gets: an opened backend and the trial's settings."""

    backend: Backend
    spec: BackendSpec
    scale: Scale
    ctx: TrialContext
    notes: list[str] = field(default_factory=list)


Body = Callable[[TrialEnv], Awaitable[dict[str, float]]]


def _everywhere(spec: BackendSpec) -> bool:
    return True


@dataclass(frozen=True)
class Workload:
    """A benchmark: id (``W1``), what it measures, and how."""

    id: str
    title: str
    description: str
    metrics: tuple[Metric, ...]
    body: Body
    applies: Callable[[BackendSpec], bool] = _everywhere
    metrics_for: Callable[[Scale], tuple[Metric, ...]] | None = None
    # (peer, lovia-store backend) ratio rows beyond the like-for-like counterparts:
    # another engine, e.g. lovia's SQLite against lovia-store on PostgreSQL.
    cross_pairs: tuple[tuple[str, str], ...] = ()

    def describe(self, scale: Scale) -> str:
        """The description with this scale's sizes filled in."""
        return self.description.format(
            s=scale,
            points=", ".join(f"{k:,}" for k in scale.w8_append_points),
            sizes="/".join(f"{n:,}" for n in scale.w8_load_sizes),
        )

    def metric_list(self, scale: Scale) -> tuple[Metric, ...]:
        """The metrics at ``scale`` (W8's depend on its size points)."""
        return self.metrics_for(scale) if self.metrics_for is not None else self.metrics


def run_ids(count: int) -> list[str]:
    """Fresh unique run ids (32 chars, within zett-agent's 36-char columns)."""
    return [uuid4().hex for _ in range(count)]


def median(values: list[float]) -> float:
    """Median, tolerant of one value."""
    return float(statistics.median(values))


class Stopwatch:
    """``with Stopwatch() as sw: ...`` then ``sw.seconds``."""

    def __enter__(self) -> Stopwatch:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._start


def check(condition: bool, message: str) -> None:
    """Fail the trial when a store returned the wrong data: a fast wrong store is no result."""
    if not condition:
        raise AssertionError(message)
