"""Threads that run the calls handed to them, in the order handed, from one queue.

What ``ThreadPoolExecutor`` did for the SQLite executor, for a twentieth of
its cost per call: ``submit`` builds a ``Future`` (a ``Condition`` over an
``RLock``), a work item, and takes a semaphore, about 45,000 instructions
counted by callgrind; a put on a ``SimpleQueue`` is one C call. The calls
report their outcome themselves (a ``_Job`` settles its caller's future), so
no future is needed here.

As with ``ThreadPoolExecutor``, calls still queued when the interpreter exits
are run first (a cancelled caller's write still runs whole), and threads whose
owner was collected without ``shutdown`` stop.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import weakref
from collections.abc import Callable

__all__ = ["WorkerThreads"]

logger = logging.getLogger(__name__)

Call = Callable[[], object]
_LIVE: weakref.WeakSet[WorkerThreads] = weakref.WeakSet()


class WorkerThreads:
    """``count`` threads named ``name`` (started at the first call), one queue."""

    def __init__(self, count: int, name: str) -> None:
        self._count = count
        self._name = name
        self._queue: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()  # a call is queued before shutdown's stops, or refused
        self._stopped = False
        weakref.finalize(self, _stop, self._queue, count)
        _LIVE.add(self)

    def put(self, call: Call) -> None:
        """Have a thread run ``call()``; calls run in the order put (one at a time
        when there is one thread)."""
        with self._lock:
            if self._stopped:
                raise RuntimeError(f"{self._name}: cannot run calls after shutdown")
            if not self._threads:
                self._start()
            self._queue.put(call)

    def _start(self) -> None:
        for index in range(self._count):
            thread = threading.Thread(
                target=_serve, args=(self._queue,), name=f"{self._name}_{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def shutdown(self) -> None:
        """Run every call already queued, then stop the threads and wait for them."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            _stop(self._queue, len(self._threads))
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()


def _serve(calls: queue.SimpleQueue[Call | None]) -> None:
    """A thread's life: run calls until told to stop. It holds the queue, not its
    owner, so an owner nobody references can be collected (and stop it)."""
    while (call := calls.get()) is not None:
        try:
            call()
        except BaseException:  # a call settles its own outcome: this is a bug, not news
            logger.exception("a call on a lovia-store worker thread raised")


def _stop(calls: queue.SimpleQueue[Call | None], threads: int) -> None:
    for _ in range(threads):
        calls.put(None)


@atexit.register
def _finish_queued_calls() -> None:
    """At exit, run what is queued: the threads are daemons, which would die mid-call."""
    for threads in list(_LIVE):
        threads.shutdown()
