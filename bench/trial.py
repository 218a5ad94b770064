"""One trial process: one backend, one or more workloads, each on fresh storage.

Spawned by the harness as ``python -m bench.trial SPEC_JSON``; prints one line
``RESULT <json>`` with, per workload, a status (ok, n/a, error), its metrics,
and the durability settings the backend actually used.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

from bench import pg
from bench.backends import BACKENDS, PgTarget, TrialContext, Unavailable, Unsupported, create
from bench.config import SCALES
from bench.workloads import WORKLOADS, TrialEnv

RESULT_PREFIX = "RESULT "


async def run_workload(
    name: str, workload_id: str, scale_name: str, tmp_root: str, pg_target: PgTarget | None
) -> dict[str, Any]:
    """Run one workload on a fresh backend; never raises."""
    spec, workload = BACKENDS[name], WORKLOADS[workload_id]
    tmpdir = Path(tempfile.mkdtemp(prefix=f"{workload_id}-{name}-", dir=tmp_root))
    backend = None
    try:
        if spec.pg:
            if pg_target is None:
                raise Unavailable("PostgreSQL not reachable")
            await pg.reset_database(pg_target)
        ctx = TrialContext(tmpdir, pg_target if spec.pg else None)
        backend = create(name, ctx)
        await backend.open()
        env = TrialEnv(backend, spec, SCALES[scale_name], ctx)
        metrics = await workload.body(env)
        durability = await backend.durability()
        return {"status": "ok", "metrics": metrics, "durability": durability, "notes": env.notes}
    except (Unavailable, Unsupported) as exc:
        return {"status": "n/a", "reason": str(exc)}
    except Exception as exc:  # reported in the table; the harness goes on
        tail = traceback.format_exc().strip().splitlines()[-6:]
        return {"status": "error", "reason": f"{type(exc).__name__}: {exc}", "traceback": tail}
    finally:
        if backend is not None:
            # Closing a broken backend must not hide the result.
            with contextlib.suppress(Exception):
                await backend.close()
        shutil.rmtree(tmpdir, ignore_errors=True)


async def run_trial(request: dict[str, Any]) -> dict[str, Any]:
    """All workloads of one request, in order, in this process."""
    target = PgTarget(**request["pg"]) if request.get("pg") else None
    return {
        wid: await run_workload(
            request["backend"], wid, request["scale"], request["tmp_root"], target
        )
        for wid in request["workloads"]
    }


def main() -> None:
    """Entry point of the trial subprocess."""
    request = json.loads(sys.argv[1])
    results = asyncio.run(run_trial(request))
    print(RESULT_PREFIX + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
