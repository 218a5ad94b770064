#!/usr/bin/env bash
# lovia's own tests, from its 0.9.119 sdist, run against lovia-store's stores.
#
#   LOVIA_SUITE_BACKEND=sqlite|postgres|mariadb tests/peers/run_lovia_suite.sh [pytest args]
#
# The sdist is downloaded from the package index (never copied into this
# repository) into LOVIA_SUITE_CACHE (default: a folder under the system's
# temp dir), once; only its tests/ and pytest.ini are unpacked, so the lovia
# that runs is the one installed in the venv. lovia_swap.py (a pytest plugin)
# puts our stores in place of lovia's; lovia_expected_failures.txt lists the
# tests that reach into lovia's private helpers or tables (run as strict
# xfails) and those that race a run against a store that never yields (run on
# lovia's in-memory stores).
# Server URLs come from LOVIA_TEST_POSTGRES_URL / LOVIA_TEST_MYSQL_URL.
set -euo pipefail

version=0.9.119
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
python=${LOVIA_SUITE_PYTHON:-$repo/.venv/bin/python}
cache=${LOVIA_SUITE_CACHE:-${TMPDIR:-/tmp}/lovia-suite-$version}
tree=$cache/lovia-$version

# lovia's test files that open sessions and checkpointers: its stores, the
# checkpoint and append-only contracts, the runner, and the web UI's ChatStore.
files=(
  tests/stores/test_stores.py
  tests/stores/test_schema_versions.py
  tests/test_checkpointer.py
  tests/test_appendonly_persistence.py
  tests/test_segment_timing.py
  tests/test_runner.py
  tests/test_runner_entries.py
  tests/test_prompt_prefix_stability.py
  tests/test_steering.py
  tests/runtime/test_checkpoint.py
  tests/runtime/test_runtime.py
  tests/web/test_web_store.py
  tests/web/test_fork.py
  tests/web/test_segment_timing.py
  tests/web/test_supervisor.py
  tests/web/test_scheduler.py
  tests/web/test_subagents.py
  tests/web/test_blocking_chat.py
  tests/web/test_run_deps.py
  tests/web/test_message_refs.py
)

# LOVIA_SUITE_FILES (space-separated) narrows the run, for debugging one file.
if [ -n "${LOVIA_SUITE_FILES:-}" ]; then
  read -r -a files <<<"$LOVIA_SUITE_FILES"
fi

if [ ! -f "$tree/pytest.ini" ]; then
  mkdir -p "$cache"
  download=$(mktemp -d "$cache/download.XXXXXX")
  "$python" -m pip download --quiet --no-deps --no-binary :all: "lovia==$version" -d "$download"
  tar -xzf "$download/lovia-$version.tar.gz" -C "$download" "lovia-$version/tests" "lovia-$version/pytest.ini"
  rm -rf "$tree"
  mv "$download/lovia-$version" "$tree"  # whole or not at all: a cut download is fetched again
  rm -rf "$download"
fi

cd "$tree"
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
export LOVIA_SUITE_EXPECTED=${LOVIA_SUITE_EXPECTED:-$here/lovia_expected_failures.txt}
exec "$python" -m pytest -p lovia_swap -p no:cacheprovider -q \
  -o asyncio_default_fixture_loop_scope=function "${files[@]}" "$@"
