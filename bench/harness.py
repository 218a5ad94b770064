"""Command line: schedule trials in rotating rounds, collect results, write the report.

python -m bench [--scale tiny|default|full] [--rounds N] [--only W1,W3]
                [--backends store-sqlite,lovia-sqlite,...] [--output PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import machine, pg
from bench.backends import BACKENDS, PgTarget
from bench.config import SCALES, Scale
from bench.report import RunInfo, render
from bench.results import Outcome, Results
from bench.trial import RESULT_PREFIX
from bench.workloads import WORKLOADS

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
DEFAULT_OUTPUT = BENCH_DIR / "RESULTS.md"


def _csv(choices: Sequence[str]) -> Any:
    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        unknown = [item for item in items if item not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown: {', '.join(unknown)} (choose from {', '.join(choices)})"
            )
        return items

    return parse


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    epilog = "workloads: " + "; ".join(f"{w.id} {w.title}" for w in WORKLOADS.values())
    epilog += ".  backends: " + ", ".join(BACKENDS) + "."
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark lovia-store against lovia, zett-agent and raw-driver floors.",
        epilog=epilog,
    )
    parser.add_argument(
        "--scale",
        choices=SCALES,
        default="default",
        help="tiny: CI smoke test, everything once (report not written to RESULTS.md)",
    )
    parser.add_argument("--rounds", type=int, help="rounds per workload (default: the scale's)")
    parser.add_argument(
        "--only", type=_csv(list(WORKLOADS)), help="comma-separated workloads, e.g. W1,W3"
    )
    parser.add_argument("--backends", type=_csv(list(BACKENDS)), help="comma-separated backends")
    parser.add_argument(
        "--output",
        type=Path,
        help=f"report file (default {DEFAULT_OUTPUT.relative_to(REPO_ROOT)};"
        " a temp file at --scale tiny)",
    )
    parser.add_argument("--json", type=Path, help="also write raw trial outcomes as JSON here")
    parser.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="run nothing: render the report again from an earlier run's --json file",
    )
    parser.add_argument(
        "--tmpdir", type=Path, help="where SQLite files go (default: the system temp dir)"
    )
    parser.add_argument("--pg-host", default="127.0.0.1")
    parser.add_argument("--pg-port", type=int, default=5432)
    parser.add_argument("--pg-user", default="postgres")
    parser.add_argument(
        "--pg-database", default="lovia_bench", help="scratch database, dropped and recreated"
    )
    parser.add_argument("--no-pg", action="store_true", help="skip PostgreSQL backends (n/a)")
    return parser.parse_args(argv)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_trial(
    backend: str, workloads: list[str], scale: Scale, tmp_root: Path, target: PgTarget | None
) -> dict[str, Outcome]:
    """Run one trial process and return its outcome per workload."""
    request = {
        "backend": backend,
        "workloads": workloads,
        "scale": scale.name,
        "tmp_root": str(tmp_root),
        "pg": vars(target) if target else None,
    }
    timeout = scale.trial_timeout_s * len(workloads)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.trial", json.dumps(request)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {
            w: {"status": "error", "reason": f"trial timed out after {timeout:.0f} s"}
            for w in workloads
        }
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            outcomes: dict[str, Outcome] = json.loads(line[len(RESULT_PREFIX) :])
            return outcomes
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {
        w: {"status": "error", "reason": f"trial process exited {proc.returncode}: {tail}"}
        for w in workloads
    }


def _summary(outcome: Outcome) -> str:
    if outcome["status"] != "ok":
        return f"{outcome['status']}: {outcome.get('reason', '')}"[:110]
    return ", ".join(f"{k}={v:,.2f}" for k, v in outcome["metrics"].items())[:110]


def _rotated(items: list[str], by: int) -> list[str]:
    if not items:
        return items
    by %= len(items)
    return items[by:] + items[:by]


def schedule(
    args: argparse.Namespace,
    scale: Scale,
    rounds: int,
    workloads: list[str],
    backends: list[str],
    tmp_root: Path,
    target: PgTarget | None,
) -> Results:
    """Run every trial: per workload, ``rounds`` rotations of the applicable backends."""
    results = Results(rounds)
    if scale.name == "tiny":  # one process per backend, every workload once: the CI smoke test
        for backend in backends:
            mine = [w for w in workloads if WORKLOADS[w].applies(BACKENDS[backend])]
            for wid, outcome in run_trial(backend, mine, scale, tmp_root, target).items():
                results.add(wid, backend, outcome)
                _log(f"[{wid}] {backend:17s} {_summary(outcome)}")
        return results
    for wid in workloads:
        names = [b for b in backends if WORKLOADS[wid].applies(BACKENDS[b])]
        for round_no in range(rounds):
            for backend in _rotated(names, round_no):
                outcome = run_trial(backend, [wid], scale, tmp_root, target)[wid]
                results.add(wid, backend, outcome)
                _log(f"[{wid} round {round_no + 1}/{rounds}] {backend:17s} {_summary(outcome)}")
    return results


def _output_path(args: argparse.Namespace, scale: Scale) -> Path:
    if args.output is None:
        if scale.name == "tiny":
            return Path(tempfile.mkstemp(prefix="lovia-bench-tiny-", suffix=".md")[1])
        return DEFAULT_OUTPUT
    if scale.name == "tiny" and args.output.resolve() == DEFAULT_OUTPUT:
        raise SystemExit("--scale tiny never overwrites bench/RESULTS.md; pick another --output")
    return Path(args.output)


def rerender(args: argparse.Namespace) -> int:
    """``--render``: the report of an earlier run, from its raw outcomes."""
    raw = json.loads(args.render.read_text())
    if "info" not in raw:
        raise SystemExit(
            f"{args.render} holds no run description (written before --render existed)"
        )
    info = RunInfo.from_json(raw["info"])
    output = _output_path(args, info.scale)
    output.write_text(render(Results.from_json(raw), info))
    _log(f"report written to {output}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; print the report and write it to a file."""
    args = parse_args(argv)
    if args.render:
        return rerender(args)
    scale = SCALES[args.scale]
    rounds = args.rounds or scale.rounds
    workloads = args.only or list(WORKLOADS)
    backends = args.backends or list(BACKENDS)
    output = _output_path(args, scale)
    target: PgTarget | None = None
    postgres: dict[str, str] = {}
    if not args.no_pg:
        candidate = PgTarget(args.pg_host, args.pg_port, args.pg_user, args.pg_database)
        problem = asyncio.run(pg.reachable(candidate))
        if problem is None:
            target = candidate
            postgres = {**asyncio.run(pg.server_info(candidate)), "database": candidate.database}
        else:
            _log(f"PostgreSQL not reachable ({problem}): its backends are n/a")
    started, clock = dt.datetime.now(dt.UTC), time.monotonic()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="lovia-bench-", dir=args.tmpdir) as tmp:
        tmp_root = Path(tmp)
        results = schedule(args, scale, rounds, workloads, backends, tmp_root, target)
        host = machine.machine_info(tmp_root)
        # A shared machine: other work shows up as noise, so say how busy it was.
        host["load average (1 min), start / end"] = f"{load_before:.2f} / {os.getloadavg()[0]:.2f}"
        info = RunInfo(
            command=" ".join(
                ["python -m bench", *map(shlex.quote, sys.argv[1:] if argv is None else argv)]
            ),
            started=started.strftime("%Y-%m-%d %H:%M UTC"),
            duration_s=time.monotonic() - clock,
            scale=scale,
            rounds=1 if scale.name == "tiny" else rounds,
            workloads=workloads,
            backends=backends,
            machine=host,
            packages={
                **machine.package_versions(),
                "lovia-store source": machine.source_revision(REPO_ROOT),
            },
            postgres=postgres,
        )
    if target is not None:
        asyncio.run(pg.drop_database(target))
    if args.json:  # first: the raw outcomes survive a report that fails to render
        raw = {**results.to_json(), "info": info.to_json()}
        args.json.write_text(json.dumps(raw, indent=1))
    report = render(results, info)
    output.write_text(report)
    print(report)
    _log(f"report written to {output}")
    errors = results.errors()
    for line in errors:
        _log(f"error: {line}")
    return 1 if errors else 0
