"""The SQLite executor's threads (lovia_store.db.worker_threads): order, shutdown, exit."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from lovia_store.db.worker_threads import WorkerThreads


def test_one_thread_runs_calls_in_the_order_put() -> None:
    threads = WorkerThreads(1, "test-writer")
    seen: list[tuple[int, str]] = []
    for index in range(200):
        threads.put(lambda i=index: seen.append((i, threading.current_thread().name)))
    threads.shutdown()
    assert [i for i, _ in seen] == list(range(200))
    assert {name for _, name in seen} == {"test-writer_0"}


def test_several_threads_run_every_call_at_once() -> None:
    threads = WorkerThreads(3, "test-reader")
    barrier = threading.Barrier(3, timeout=60)
    names: list[str] = []

    def meet() -> None:
        barrier.wait()  # only passes if three calls run at the same time
        names.append(threading.current_thread().name)

    for _ in range(3):
        threads.put(meet)
    threads.shutdown()
    assert sorted(names) == ["test-reader_0", "test-reader_1", "test-reader_2"]


def test_shutdown_runs_what_is_queued_then_refuses_more() -> None:
    threads = WorkerThreads(1, "test-writer")
    done: list[int] = []
    threads.put(lambda: time.sleep(0.2))
    for index in range(5):
        threads.put(lambda i=index: done.append(i))
    threads.shutdown()
    assert done == [0, 1, 2, 3, 4]
    with pytest.raises(RuntimeError, match="after shutdown"):
        threads.put(lambda: None)
    threads.shutdown()  # twice is harmless


def test_a_call_that_raises_is_logged_and_the_thread_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    threads = WorkerThreads(1, "test-writer")
    done: list[str] = []
    threads.put(lambda: 1 / 0)
    threads.put(lambda: done.append("after"))
    threads.shutdown()
    assert done == ["after"]
    assert "ZeroDivisionError" in caplog.text


def test_threads_of_an_owner_collected_without_shutdown_stop() -> None:
    threads = WorkerThreads(2, "test-orphan")
    threads.put(lambda: None)
    started = [t for t in threading.enumerate() if t.name.startswith("test-orphan")]
    assert len(started) == 2
    del threads
    gc.collect()
    for thread in started:
        thread.join(timeout=60)
        assert not thread.is_alive()


def test_calls_still_queued_at_exit_are_run(tmp_path: Path) -> None:
    """The threads are daemons: without the exit hook, the interpreter would stop
    them mid-call (a cancelled caller's write must still run whole)."""
    marker = tmp_path / "ran"
    script = f"""
        import time
        from pathlib import Path
        from lovia_store.db.worker_threads import WorkerThreads

        threads = WorkerThreads(1, "exiting")
        threads.put(lambda: time.sleep(0.5))
        threads.put(lambda: Path({str(marker)!r}).write_text("ran"))
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(script)], check=True, timeout=60)
    assert marker.read_text() == "ran"
