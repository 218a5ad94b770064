"""Scales: how big each workload is at ``tiny``, ``default`` and ``full``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scale:
    """Every size knob of every workload; one instance per named scale."""

    name: str
    rounds: int
    w1_runs: int
    w2_sessions: int
    w2_runs: int
    w3_entries: int
    w4_steps: int
    w5_messages: int
    w5_deep_offset: int
    w5_repeats: int
    w6_runs: int
    w7_tasks: int
    w7_runs_per_task: int
    w8_append_points: tuple[int, ...]
    w8_window: int
    w8_load_sizes: tuple[int, ...]
    w9_writers: int
    w9_runs_per_writer: int
    w10_runs: int
    trial_timeout_s: float


SCALES: dict[str, Scale] = {
    # CI smoke test: everything once, numbers meaningless.
    "tiny": Scale(
        name="tiny",
        rounds=1,
        w1_runs=5,
        w2_sessions=3,
        w2_runs=2,
        w3_entries=80,
        w4_steps=10,
        w5_messages=200,
        w5_deep_offset=150,
        w5_repeats=2,
        w6_runs=10,
        w7_tasks=10,
        w7_runs_per_task=1,
        w8_append_points=(1, 20),
        w8_window=2,
        w8_load_sizes=(40, 80),
        w9_writers=4,
        w9_runs_per_writer=3,
        w10_runs=1,
        trial_timeout_s=60,
    ),
    # Everyday run: the sizes where cheap, smaller where prefill would dominate.
    "default": Scale(
        name="default",
        rounds=3,
        w1_runs=300,
        w2_sessions=20,
        w2_runs=30,
        w3_entries=2_400,
        w4_steps=300,
        w5_messages=2_000,
        w5_deep_offset=1_900,
        w5_repeats=20,
        w6_runs=300,
        w7_tasks=10,
        w7_runs_per_task=3,
        w8_append_points=(1, 1_000),
        w8_window=5,
        w8_load_sizes=(1_000, 10_000),
        w9_writers=4,
        w9_runs_per_writer=100,
        w10_runs=30,
        trial_timeout_s=600,
    ),
    # The full sizes: W5 at 100,000 messages, W8 up to the 10,000th run.
    "full": Scale(
        name="full",
        rounds=3,
        w1_runs=300,
        w2_sessions=20,
        w2_runs=30,
        w3_entries=2_400,
        w4_steps=1_000,
        w5_messages=100_000,
        w5_deep_offset=90_000,
        w5_repeats=20,
        w6_runs=300,
        w7_tasks=10,
        w7_runs_per_task=10,
        w8_append_points=(1, 1_000, 10_000),
        w8_window=5,
        w8_load_sizes=(1_000, 10_000, 100_000),
        w9_writers=4,
        w9_runs_per_writer=300,
        w10_runs=100,
        trial_timeout_s=1_800,
    ),
}
