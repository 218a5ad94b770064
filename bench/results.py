"""Trial outcomes, and the medians and per-round ratios the report shows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.workloads.base import Metric, median

Outcome = dict[str, Any]  # {"status": "ok"|"n/a"|"error", "metrics": {...}, "reason": str, ...}


@dataclass
class Results:
    """``cells[workload][backend]`` holds one outcome per round, in round order."""

    rounds: int
    cells: dict[str, dict[str, list[Outcome]]] = field(default_factory=dict)

    def add(self, workload: str, backend: str, outcome: Outcome) -> None:
        """Record one trial's outcome for ``(workload, backend)``."""
        self.cells.setdefault(workload, {}).setdefault(backend, []).append(outcome)

    def outcomes(self, workload: str, backend: str) -> list[Outcome]:
        """Every round's outcome for ``(workload, backend)``."""
        return self.cells.get(workload, {}).get(backend, [])

    def values(self, workload: str, backend: str, key: str) -> list[float]:
        """The metric's value in each round that succeeded."""
        return [
            o["metrics"][key]
            for o in self.outcomes(workload, backend)
            if o["status"] == "ok" and key in o["metrics"]
        ]

    def median(self, workload: str, backend: str, key: str) -> float | None:
        """Median over successful rounds, or ``None``."""
        values = self.values(workload, backend, key)
        return median(values) if values else None

    def round_ratios(
        self, workload: str, backend: str, counterpart: str, metric: Metric
    ) -> list[float | None]:
        """Per round, lovia-store's ``counterpart`` relative to ``backend`` (>1: it is better).

        Taken within each round (the two trials ran back to back), so slow drift
        of the machine cancels out; None for a round where either side failed.
        """
        ratios: list[float | None] = []
        pairs = zip(
            self.outcomes(workload, counterpart), self.outcomes(workload, backend), strict=False
        )
        for mine, theirs in pairs:
            a = mine["metrics"].get(metric.key) if mine["status"] == "ok" else None
            b = theirs["metrics"].get(metric.key) if theirs["status"] == "ok" else None
            if a is None or b is None or a <= 0 or b <= 0:
                ratios.append(None)
            else:
                ratios.append(a / b if metric.higher_is_better else b / a)
        return ratios

    def ratio(self, workload: str, backend: str, counterpart: str, metric: Metric) -> float | None:
        """Median over rounds of :meth:`round_ratios`, or ``None``."""
        ratios = [r for r in self.round_ratios(workload, backend, counterpart, metric) if r]
        return median(ratios) if ratios else None

    def status_note(self, workload: str, backend: str) -> str:
        """Why some rounds or metrics gave no number (distinct reasons), or ''."""
        reasons = []
        for o in self.outcomes(workload, backend):
            texts = list(o.get("notes", []))
            if o["status"] != "ok":
                texts.append(f"{o['status']}: {o.get('reason', '')}".strip())
            reasons += [text for text in texts if text not in reasons]
        return "; ".join(reasons)

    def durability(self, backend: str) -> dict[str, str]:
        """Settings probed by the first successful trial of ``backend``."""
        for by_backend in self.cells.values():
            for o in by_backend.get(backend, []):
                if o["status"] == "ok" and o.get("durability"):
                    return dict(o["durability"])
        return {}

    def errors(self) -> list[str]:
        """One line per trial that failed (n/a is not a failure): the exit status depends on it."""
        return [
            f"{workload} {backend}: {o.get('reason', '')}"
            for workload, by_backend in self.cells.items()
            for backend, outcomes in by_backend.items()
            for o in outcomes
            if o["status"] == "error"
        ]

    def to_json(self) -> dict[str, Any]:
        """Raw outcomes, for ``--json``."""
        return {"rounds": self.rounds, "cells": self.cells}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Results:
        """What :meth:`to_json` wrote."""
        return cls(int(data["rounds"]), data["cells"])
