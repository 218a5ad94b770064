"""The issue's performance targets, checked against one run's results.

Ratios are taken within each round (see ``Results.round_ratios``); absolute
numbers are medians over rounds. A target with no data in this run (backend or
workload not run, or not at this scale) reads n/a.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.config import Scale
from bench.results import Results
from bench.workloads import WORKLOADS
from bench.workloads.base import Metric, median

_TIMES = "\u00d7"
_FLOOR = 1.5  # "within 1.5x of the raw floor"
_STORE_SQLITE = ("store-sqlite", "store-sqlite-wal", "store-sqlite-wal-normal")
_STORES = (*_STORE_SQLITE, "store-pg")
_FLOORS = {
    "store-sqlite": "raw-sqlite",
    "store-sqlite-wal": "raw-sqlite-wal",
    "store-sqlite-wal-normal": "raw-sqlite-wal-normal",
    "store-pg": "raw-pg",
}
# (peer, lovia-store backend) at the same durability; lovia-sqlite (DELETE + FULL) is as
# durable as store-sqlite-wal (WAL + FULL).
_LOVIA = (
    ("lovia-sqlite", "store-sqlite"),
    ("lovia-sqlite-wal", "store-sqlite-wal"),
    ("lovia-sqlite", "store-sqlite-wal"),
)
_ZETT_SQLITE = (("zett-sqlite", "store-sqlite-wal-normal"), ("zett-sqlite", "store-sqlite-wal"))


@dataclass(frozen=True)
class Check:
    """One row of the targets table."""

    workload: str
    target: str
    subject: str
    measured: str
    met: bool | None  # None: no data in this run


@dataclass(frozen=True)
class _RatioTarget:
    """lovia-store's per-round advantage over a peer (> 1: lovia-store better) >= ``least``.

    ``floor=True`` words it as "lovia-store takes at most ``1 / least`` times the floor's time".
    """

    workload: str
    key: str
    least: float
    target: str
    pairs: tuple[tuple[str, str], ...]
    floor: bool = False


_RATIOS = (
    *(
        target
        for wid in ("W1", "W2")
        for target in (
            _RatioTarget(
                wid, "runs_per_s", 2.5, "SQLite: >= 2.5x lovia's runs/s, same durability", _LOVIA
            ),
            _RatioTarget(wid, "runs_per_s", 50, "SQLite: >= 50x zett-agent's runs/s", _ZETT_SQLITE),
            _RatioTarget(
                wid,
                "runs_per_s",
                20,
                "PostgreSQL: >= 20x zett-agent's runs/s",
                (("zett-pg", "store-pg"),),
            ),
            _RatioTarget(
                wid,
                "runs_per_s",
                1 / _FLOOR,
                "PostgreSQL: within 1.5x of raw asyncpg",
                (("raw-pg", "store-pg"),),
                floor=True,
            ),
        )
    ),
    _RatioTarget("W3", "load_ms", 1.0, "no slower than lovia", _LOVIA),
    _RatioTarget(
        "W3", "load_ms", 6, ">= 6x faster than zett-agent", (*_ZETT_SQLITE, ("zett-pg", "store-pg"))
    ),
    _RatioTarget("W4", "us_per_step", 3, "SQLite: >= 3x faster than lovia per step", _LOVIA),
    _RatioTarget(
        "W4",
        "us_per_step",
        1 / _FLOOR,
        "PostgreSQL: within 1.5x of raw asyncpg",
        (("raw-pg", "store-pg"),),
        floor=True,
    ),
    _RatioTarget(
        "W10",
        "us_per_step",
        2,
        "lovia's Runner, SQLite WAL: >= 2x faster than lovia per checkpoint step, same "
        "durability (issue 14)",
        (("lovia-sqlite-wal", "store-sqlite-wal"), ("lovia-sqlite", "store-sqlite-wal")),
    ),
    *(
        _RatioTarget(
            "W6",
            key,
            1 / _FLOOR,
            f"{what} within 1.5x of the raw floor",
            tuple((floor, store) for store, floor in _FLOORS.items()),
            floor=True,
        )
        for key, what in (("trim_ms", "trim"), ("rewind_ms", "rewind"))
    ),
)


def _metric(wid: str, key: str, scale: Scale) -> Metric | None:
    return next((m for m in WORKLOADS[wid].metric_list(scale) if m.key == key), None)


def _rounds(values: Sequence[float | None], digits: int = 2) -> str:
    if len(values) < 2:
        return ""
    return " (rounds " + " / ".join("-" if v is None else f"{v:,.{digits}f}" for v in values) + ")"


def _ratio_checks(results: Results, scale: Scale, target: _RatioTarget) -> list[Check]:
    metric = _metric(target.workload, target.key, scale)
    checks = []
    for peer, store in target.pairs:
        if metric is None or not (
            results.outcomes(target.workload, peer) and results.outcomes(target.workload, store)
        ):
            continue
        ratio = results.ratio(target.workload, peer, store, metric)
        per_round = results.round_ratios(target.workload, peer, store, metric)
        if ratio is None:
            measured, met = "n/a", None
        elif target.floor:  # as lovia-store's time (or 1 / throughput) over the floor's
            slowdown = [None if r is None else 1 / r for r in per_round]
            measured = f"{1 / ratio:,.2f}{_TIMES} the floor's" + _rounds(slowdown)
            met = ratio >= target.least
        else:
            measured = f"{ratio:,.2f}{_TIMES}" + _rounds(per_round)
            met = ratio >= target.least
        checks.append(
            Check(target.workload, target.target, f"`{store}` vs `{peer}`", measured, met)
        )
    return checks


def _value_checks(
    results: Results,
    wid: str,
    key: str,
    target: str,
    backends: Sequence[str],
    ok: Callable[[float], bool],
    unit: str,
    *,
    digits: int = 2,
    context: Callable[[str], str] = lambda _b: "",
) -> list[Check]:
    checks = []
    for backend in backends:
        if not results.outcomes(wid, backend):
            continue
        value = results.median(wid, backend, key)
        measured = (
            "n/a" if value is None else f"{value:,.{digits}f} {unit}".rstrip() + context(backend)
        )
        checks.append(
            Check(wid, target, f"`{backend}`", measured, None if value is None else ok(value))
        )
    return checks


def _within(
    results: Results, wid: str, backend: str, value: Callable[[dict[str, float]], float | None]
) -> list[float | None]:
    """Per round, a number computed from one trial's own metrics."""
    out: list[float | None] = []
    for outcome in results.outcomes(wid, backend):
        out.append(value(outcome["metrics"]) if outcome["status"] == "ok" else None)
    return out


def _within_checks(
    results: Results,
    wid: str,
    target: str,
    backends: Sequence[str],
    value: Callable[[dict[str, float]], float | None],
    most: float,
) -> list[Check]:
    checks = []
    for backend in backends:
        if not results.outcomes(wid, backend):
            continue
        per_round = _within(results, wid, backend, value)
        known = [v for v in per_round if v is not None]
        if not known:
            checks.append(Check(wid, target, f"`{backend}`", "n/a", None))
            continue
        mid = median(known)
        checks.append(
            Check(
                wid, target, f"`{backend}`", f"{mid:,.2f}{_TIMES}" + _rounds(per_round), mid <= most
            )
        )
    return checks


def _ratio_of(
    numerator: str, denominator: str, scale_by: float = 1.0
) -> Callable[[dict[str, float]], float | None]:
    def value(metrics: dict[str, float]) -> float | None:
        a, b = metrics.get(numerator), metrics.get(denominator)
        return None if a is None or not b else a / b / scale_by

    return value


def evaluate(results: Results, scale: Scale, backends: Sequence[str]) -> list[Check]:
    """Every target the run has data for, in the issue's order."""
    mine = [b for b in _STORES if b in backends]
    sqlite = [b for b in _STORE_SQLITE if b in backends]
    pg = [b for b in ("store-pg",) if b in backends]
    checks: list[Check] = []
    by_workload: dict[str, list[Check]] = {}
    for target in _RATIOS:
        by_workload.setdefault(target.workload, []).extend(_ratio_checks(results, scale, target))

    def floor_of(wid: str, key: str, digits: int = 0) -> Callable[[str], str]:
        def text(backend: str) -> str:
            floor = _FLOORS[backend]
            value = results.median(wid, floor, key)
            return "" if value is None else f" (floor `{floor}`: {value:,.{digits}f})"

        return text

    by_workload["W4"] += _value_checks(
        results,
        "W4",
        "us_per_step",
        "SQLite: ~0.5 ms or less per step",
        sqlite,
        lambda v: v <= 500,
        "µs",
        digits=0,
        context=floor_of("W4", "us_per_step"),
    )
    w5 = []
    for key, what in (
        ("offset0_ms", "offset 0"),
        ("deep_offset_ms", f"offset {scale.w5_deep_offset:,}"),
        ("after_seq_ms", f"after_sequence={scale.w5_deep_offset:,}"),
    ):
        w5 += _value_checks(
            results,
            "W5",
            key,
            f"SQLite: a page of 50 < 1 ms ({what})",
            sqlite,
            lambda v: v < 1.0,
            "ms",
        )
        w5 += _value_checks(
            results,
            "W5",
            key,
            f"PostgreSQL: a page of 50 < 1.5 ms ({what})",
            pg,
            lambda v: v < 1.5,
            "ms",
        )
    w5 += _within_checks(
        results,
        "W5",
        f"a deep page costs the same as the first (offset {scale.w5_deep_offset:,} / offset 0 "
        f"<= 1.25, in a {scale.w5_messages:,}-message session)",
        mine,
        _ratio_of("deep_offset_ms", "offset0_ms"),
        1.25,
    )
    by_workload["W5"] = w5
    w7 = []
    for key, what in (
        ("failed_calls", "failed calls"),
        ("missing_entries", "missing entries"),
        ("silently_lost", "silently lost entries"),
    ):
        w7 += _value_checks(
            results, "W7", key, f"zero {what}", mine, lambda v: v == 0, "", digits=0
        )
    by_workload["W7"] = w7
    points, sizes = scale.w8_append_points, scale.w8_load_sizes
    first, last = points[0], points[-1]
    # The two largest sizes: at the smallest, a cold first read and a heap that
    # fits in cache make the cost per entry unrepresentative.
    small, big = sizes[-2] if len(sizes) > 1 else sizes[0], sizes[-1]
    w8 = _within_checks(
        results,
        "W8",
        f"append #{last:,} within 1.3x of append #{first:,}",
        mine,
        _ratio_of(f"append_{last}_ms", f"append_{first}_ms"),
        1.3,
    )
    if len(points) > 2:  # #1 is the session's first write: also compare with a warm one
        w8 += _within_checks(
            results,
            "W8",
            f"append #{last:,} within 1.3x of append #{points[-2]:,} (steady state)",
            mine,
            _ratio_of(f"append_{last}_ms", f"append_{points[-2]}_ms"),
            1.3,
        )
    for what, key in (("load", "load"), ("a stream", "stream")):
        w8 += _within_checks(
            results,
            "W8",
            f"{what} grows linearly: time per entry at {big:,} / at {small:,} <= 1.3",
            mine,
            _ratio_of(f"{key}_{big}_ms", f"{key}_{small}_ms", big / small),
            1.3,
        )
    w8 += _value_checks(
        results,
        "W8",
        f"stream_peak_{big}_mib",
        f"streaming {big:,} entries peaks < 100 MB (issue: at 100,000)",
        mine,
        lambda v: v < 100 / 1.048576,
        "MiB",
    )
    by_workload["W8"] = w8
    by_workload["W10"] += _value_checks(
        results,
        "W10",
        "conv_pct",
        "the integration's conversion < 10% of our own step cost (issue 14)",
        mine,
        lambda v: v < 10,
        "%",
        context=lambda b: f" ({results.median('W10', b, 'conv_us') or 0:,.1f} µs/step)",
    )
    for wid in WORKLOADS:
        checks += by_workload.get(wid, [])
    return checks


def render(results: Results, scale: Scale, backends: Sequence[str]) -> list[str]:
    """The "Targets" section of the report."""
    checks = evaluate(results, scale, backends)
    if not checks:
        return []
    rows = [
        [
            c.workload,
            c.target,
            c.subject,
            c.measured,
            {True: "met", False: "**not met**", None: "n/a"}[c.met],
        ]
        for c in checks
    ]
    met = sum(c.met is True for c in checks)
    missed = sum(c.met is False for c in checks)
    header = ["", "target (issue 6 unless named)", "lovia-store backend (vs)", "measured", ""]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return [
        "## Targets",
        "",
        f"The issue's targets against this run: {met} met, {missed} not met. Ratios are medians of "
        "per-round ratios (> 1: lovia-store better; \"the floor's\" rows give lovia-store's time "
        "over the raw floor's); absolute numbers are medians over rounds. W5's and W8's absolute "
        "targets are stated at the issue's sizes (--scale full); at a smaller scale they are "
        "checked at that scale's sizes.",
        "",
        *lines,
        "",
    ]
