"""All workloads, in report order."""

from __future__ import annotations

from bench.workloads.appends import W1, W2
from bench.workloads.base import Metric, TrialEnv, Workload
from bench.workloads.checkpoints import W4
from bench.workloads.contention import W7
from bench.workloads.lovia_runner import W10
from bench.workloads.maintenance import W6
from bench.workloads.multiproc import W9
from bench.workloads.reads import W3, W5
from bench.workloads.scaling import W8

WORKLOADS: dict[str, Workload] = {w.id: w for w in (W1, W2, W3, W4, W5, W6, W7, W8, W9, W10)}

__all__ = ["WORKLOADS", "Metric", "TrialEnv", "Workload"]
