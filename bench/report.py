"""Render the Markdown report."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from bench import data, targets
from bench.backends import BACKENDS
from bench.config import SCALES, Scale
from bench.results import Results
from bench.workloads import WORKLOADS, Workload
from bench.workloads.base import Metric


@dataclass(frozen=True)
class RunInfo:
    """How the harness was invoked, and what it found around it."""

    command: str
    started: str
    duration_s: float
    scale: Scale
    rounds: int
    workloads: Sequence[str]
    backends: Sequence[str]
    machine: dict[str, str]
    packages: dict[str, str]
    postgres: dict[str, str]

    def to_json(self) -> dict[str, object]:
        """This run's description, saved beside the raw outcomes (``--json``)."""
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "scale": self.scale.name}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunInfo:
        """What :meth:`to_json` wrote."""
        return cls(**{**data, "scale": SCALES[data["scale"]]})


_EN_DASH, _TIMES = "\u2013", "\u00d7"

DURABILITY = """\
With `synchronous=FULL` a SQLite commit is on disk when the call returns, in either journal
mode (DELETE or WAL). With `synchronous=NORMAL` under WAL (zett-agent's fixed setting) the WAL
is not synced per commit: an application crash loses nothing, an OS crash or power loss can
drop the last commits. Every durability level has a like-for-like lovia-store backend:
`store-sqlite` (DELETE + FULL, as `lovia-sqlite`), `store-sqlite-wal` (WAL + FULL, as
`lovia-sqlite-wal`, and as durable as `lovia-sqlite`), `store-sqlite-wal-normal` (WAL + NORMAL,
as `zett-sqlite` and `raw-sqlite-wal-normal`). Each ratio row says whether the two sides ran at
the same durability, as probed from a live connection in the trial. PostgreSQL backends share
the server settings above."""

METHOD = """\
- **Trials.** Every (workload, backend) trial runs in its own Python process on fresh storage
  (a new temporary directory for SQLite files; the scratch PostgreSQL database `{db}` dropped
  and recreated), so no cache, pool or import warmed by one trial helps another.{isolation}
- **Rounds.** Backends are interleaved in rounds whose order rotates (A B C, B C A, C A B, ...),
  so slow drift of a shared machine lands on every backend alike. Tables show the **median**
  over rounds (min to max in brackets).
- **Ratios.** Each peer and floor is compared with the lovia-store backend at the same engine,
  journal mode and `synchronous` setting (its like-for-like *counterpart*), and where useful with
  another at the same durability (lovia's default DELETE journal vs lovia-store in WAL, both
  `synchronous=FULL`), within each round; tables give the median of the per-round ratios and
  each round's, oriented so that **> 1 means lovia-store is better** (faster, or more
  throughput), and say whether the two ran at the same durability.
- **Data.** A run is {entries} entries, {kb:.1f} KB of JSON (lovia's entry shapes): a user input,
  three tool_call + ~1.8 KB tool_result pairs, a final assistant text. Runs are converted to each
  library's own entry/message objects before the clock starts. zett-agent stores one message per
  entry, so a run is 8 of its `append` calls. Untimed setup (prefill) uses each backend's public
  append, except zett-agent (bulk rows through its own ORM models, same columns its `append` writes)
  and the raw floors (one transaction).
- **Raw floors.** The least a correct store does: one row per entry, a per-session counter row (no
  `MAX()+1`), a run row for run_id idempotency; sqlite3 on one connection in one worker thread,
  asyncpg with a pool. Their distance to a library is that library's overhead.
"""


def _fmt(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _cell(results: Results, wid: str, backend: str, metric: Metric) -> str:
    values = results.values(wid, backend, metric.key)
    if not values:
        return "n/a"
    mid = _fmt(results.median(wid, backend, metric.key), metric.digits)
    if len(values) > 1 and min(values) != max(values):
        low, high = _fmt(min(values), metric.digits), _fmt(max(values), metric.digits)
        return f"{mid} ({low}{_EN_DASH}{high})"
    return mid


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def same_durability(results: Results, backend: str, counterpart: str) -> str:
    """How the two backends' commit guarantees compare, from the probed settings.

    ``synchronous`` decides what a power loss can take; the journal mode alone
    does not (DELETE and WAL at FULL are equally durable), so a journal-only
    difference reads "same durability".
    """
    if BACKENDS[backend].pg != BACKENDS[counterpart].pg:
        return "different engines (PostgreSQL: server settings)"
    if BACKENDS[backend].pg:
        return "same server"
    mine, theirs = results.durability(counterpart), results.durability(backend)
    if not mine or not theirs:
        return "?"

    def pair(key: str) -> tuple[str, str]:
        return str(mine.get(key, "?")).lower(), str(theirs.get(key, "?")).lower()

    (my_journal, their_journal), (my_sync, their_sync) = pair("journal_mode"), pair("synchronous")
    if my_sync != their_sync:
        return f"**differs**: synchronous {my_sync.upper()} vs {their_sync.upper()}" + (
            f", journal {my_journal} vs {their_journal}" if my_journal != their_journal else ""
        )
    if my_journal != their_journal:
        same = f"same durability (synchronous={my_sync.upper()})"
        return f"{same}; journal {my_journal} vs {their_journal}"
    return "same"


def _ratio_cell(results: Results, wid: str, backend: str, counterpart: str, metric: Metric) -> str:
    """Median of the per-round ratios, then each round's (``-``: that round failed)."""
    middle = results.ratio(wid, backend, counterpart, metric)
    if middle is None:
        return "n/a"
    rounds = results.round_ratios(wid, backend, counterpart, metric)
    text = f"{middle:,.2f}{_TIMES}"
    if len(rounds) > 1:
        text += " (" + " / ".join("-" if r is None else f"{r:,.2f}" for r in rounds) + ")"
    return text


def _workload_section(results: Results, workload: Workload, info: RunInfo) -> list[str]:
    metrics = workload.metric_list(info.scale)
    backends = [
        b
        for b in info.backends
        if workload.applies(BACKENDS[b]) and results.outcomes(workload.id, b)
    ]
    lines = [f"### {workload.id}. {workload.title}", "", workload.describe(info.scale), ""]
    rows = []
    for backend in backends:
        spec = BACKENDS[backend]
        ok = sum(o["status"] == "ok" for o in results.outcomes(workload.id, backend))
        rows.append(
            [
                f"`{backend}`",
                spec.family,
                *[_cell(results, workload.id, backend, m) for m in metrics],
                f"{ok}/{len(results.outcomes(workload.id, backend))}",
                results.status_note(workload.id, backend),
            ]
        )
    lines += _table(["backend", "library", *[m.label for m in metrics], "rounds ok", "note"], rows)
    ratio_metrics = [m for m in metrics if m.ratio]
    pairs = [(b, c) for b in backends for c in BACKENDS[b].counterparts]
    pairs += list(workload.cross_pairs)
    ratio_rows = []
    for backend, counterpart in pairs:
        if backend in backends and counterpart in backends:
            ratio_rows.append(
                [
                    f"`{backend}`",
                    f"`{counterpart}`",
                    *[
                        _ratio_cell(results, workload.id, backend, counterpart, m)
                        for m in ratio_metrics
                    ],
                    same_durability(results, backend, counterpart),
                ]
            )
    if ratio_rows and ratio_metrics:
        if all(cell == "n/a" for row in ratio_rows for cell in row[2:-1]):
            lines += ["", "Ratios to lovia-store: n/a (no lovia-store result in this run)."]
        else:
            lines += [
                "",
                "lovia-store relative to each peer and floor (> 1: lovia-store better): median of "
                "the per-round ratios, then each round's.",
                "",
            ]
            lines += _table(
                [
                    "vs",
                    "lovia-store backend",
                    *[m.label for m in ratio_metrics],
                    "durability (lovia-store vs it)",
                ],
                ratio_rows,
            )
    return [*lines, ""]


def _headline(results: Results, info: RunInfo) -> list[str]:
    """Backends x workloads, the first metric of each workload."""
    columns = [(wid, WORKLOADS[wid].metric_list(info.scale)[0]) for wid in info.workloads]
    rows = []
    for backend in info.backends:
        cells = []
        for wid, metric in columns:
            if not WORKLOADS[wid].applies(BACKENDS[backend]) or not results.outcomes(wid, backend):
                cells.append("—")
            else:
                cells.append(_fmt(results.median(wid, backend, metric.key), metric.digits))
        rows.append([f"`{backend}`", *cells])
    header = ["backend", *[f"{wid} {metric.label}" for wid, metric in columns]]
    return [
        "## Headline",
        "",
        "Median of the first metric of each workload (— : not run for this backend).",
        "",
        *_table(header, rows),
        "",
    ]


def _environment(info: RunInfo) -> list[str]:
    """Machine, packages and PostgreSQL server tables."""
    postgres = (
        _table(["setting", "value"], [[k, v] for k, v in info.postgres.items()])
        if info.postgres
        else ["not reachable: PostgreSQL backends are n/a"]
    )
    return [
        "## Machine",
        "",
        *_table(["", ""], [[k, v] for k, v in info.machine.items()]),
        "",
        "## Packages",
        "",
        *_table(["package", "version"], [[k, v] for k, v in info.packages.items()]),
        "",
        "## PostgreSQL",
        "",
        *postgres,
        "",
    ]


def _durability(results: Results, info: RunInfo) -> list[str]:
    """What each backend promises on commit: configured, and as probed in its trials."""
    rows = []
    for name in info.backends:
        spec = BACKENDS[name]
        probed = ", ".join(f"{k}={v}" for k, v in results.durability(name).items())
        fallback = "server settings (see PostgreSQL)" if spec.pg else "\u2014"
        rows.append([f"`{name}`", spec.family, spec.durability, probed or fallback])
    header = ["backend", "library", "configured", "probed in the trial"]
    return ["## Durability", "", DURABILITY, "", *_table(header, rows), ""]


def render(results: Results, info: RunInfo) -> str:
    """The whole report as Markdown."""
    isolation = (
        " At `--scale tiny` one process runs all workloads of a backend (still fresh storage each)."
        if info.scale.name == "tiny"
        else ""
    )
    method = METHOD.format(
        db=info.postgres.get("database", "lovia_bench"),
        isolation=isolation,
        entries=data.ENTRIES_PER_RUN,
        kb=data.run_bytes() / 1000,
    )
    lines = [
        "# lovia-store benchmark results",
        "",
        f"Generated {info.started} by `{info.command}` in {info.duration_s:,.0f} s: "
        f"scale `{info.scale.name}`, {info.rounds} round(s), "
        f"workloads {', '.join(info.workloads)}.",
        "",
        *_headline(results, info),
        *targets.render(results, info.scale, info.backends),
        *_environment(info),
        *_durability(results, info),
        "## Method",
        "",
        method,
        "## Results",
        "",
    ]
    for wid in info.workloads:
        lines += _workload_section(results, WORKLOADS[wid], info)
    return "\n".join(lines).rstrip() + "\n"
