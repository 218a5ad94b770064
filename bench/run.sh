#!/usr/bin/env bash
# Run the lovia-store benchmark in its own environment (bench/.venv).
#
#   bench/run.sh                    # default scale, report to bench/RESULTS.md
#   bench/run.sh --scale tiny       # CI smoke test, under a minute, report to a temp file
#   bench/run.sh --only W1,W3 --rounds 5 --backends store-sqlite,lovia-sqlite,raw-sqlite
#
# Makes bench/.venv on first use, installs bench/requirements.txt (the peers and
# drivers, never the product's dependencies) and the project itself in editable
# mode, and reinstalls only when one of those files changes.
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$BENCH_DIR")"
VENV="$BENCH_DIR/.venv"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
    echo "bench: creating $VENV" >&2
    "$PYTHON" -m venv "$VENV"
fi

stamp_of() {
    cat "$BENCH_DIR/requirements.txt" "$ROOT/pyproject.toml" 2>/dev/null | sha256sum | cut -d' ' -f1
}
STAMP_FILE="$VENV/.bench-installed"
if [ "$(cat "$STAMP_FILE" 2>/dev/null)" != "$(stamp_of)" ]; then
    echo "bench: installing requirements" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$BENCH_DIR/requirements.txt"
    if [ -f "$ROOT/pyproject.toml" ]; then
        echo "bench: installing lovia-store from $ROOT (editable)" >&2
        if ! "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT"; then
            echo "bench: WARNING: lovia-store did not install; its backends will be n/a" >&2
        fi
    else
        echo "bench: no $ROOT/pyproject.toml yet; lovia-store backends will be n/a" >&2
    fi
    stamp_of > "$STAMP_FILE"
fi

cd "$ROOT"
# The CI smoke test (--scale tiny) also runs the standalone benchmarks at their tiny scale.
if [[ " $* " == *" --scale tiny "* ]]; then
    SECONDS=0
    "$VENV/bin/python" -m bench "$@"
    echo "bench: W1-W10 took ${SECONDS} s" >&2
    for standalone in bench.prune bench.copy bench.startup bench.pooler bench.galera bench.replication bench.storage; do
        SECONDS=0
        "$VENV/bin/python" -m "$standalone" --scale tiny
        echo "bench: $standalone took ${SECONDS} s" >&2
    done
    SECONDS=0
    # Each callgrind cell is a child under valgrind (about 5 s): every workload's child
    # runs natively (--smoke), and the counting itself once on SQLite and PostgreSQL, keep
    # them from rotting within CI's time.
    "$VENV/bin/python" -m bench.instructions --scale tiny --backends sqlite --smoke
    "$VENV/bin/python" -m bench.instructions --scale tiny --backends sqlite,pg --work append
    echo "bench: bench.instructions took ${SECONDS} s" >&2
    exit 0
fi
exec "$VENV/bin/python" -m bench "$@"
