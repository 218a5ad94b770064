"""Refusing lovia's own ``Runner`` on a native store before the run does any work.

lovia 0.9's Runner calls a session's ``segments`` and a checkpointer's ``load`` (or,
to restart, ``delete``) first, with nothing but an id, and hands over its own entry
objects only after the model has answered (a checkpoint) or at the end of the run
(the session). The one thing it sets before that first call is its run's agent in
``lovia.log_config.CURRENT_AGENT``, a context variable it keeps for the run's
duration (tools and hooks included): a native store's first call checks it.

lovia-store's own code marks its calls with ``own_calls`` (its Runner, and the
drop-ins in ``lovia_store.integrations.lovia``, which use the native stores inside
lovia's runs), so a native store it drives is not mistaken for one lovia drives.
lovia is never imported here: if it is not loaded, no lovia run is in progress.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .errors import ForeignRunnerError

__all__ = ["own_calls", "refuse_lovias_runner"]

_DROP_INS = {
    "SQLSession": "SQLSession",
    "SQLiteSession": "SQLiteSession",
    "InMemorySession": "SQLiteSession",
    "SQLCheckpointer": "SQLCheckpointer",
    "SQLiteCheckpointer": "SQLiteCheckpointer",
    "InMemoryCheckpointer": "SQLiteCheckpointer",
}

_OWN: ContextVar[object] = ContextVar("lovia_store_own_calls", default=None)
"""The lovia agent that was running when lovia-store's own code took over (None: none)."""


def _lovias_agent() -> object:
    """The agent of the lovia run in progress in this context, or None."""
    module = sys.modules.get("lovia.log_config")
    current = getattr(module, "CURRENT_AGENT", None)
    return None if current is None else current.get()


@contextmanager
def own_calls() -> Iterator[None]:
    """Mark the calls made inside as lovia-store's own, even within a lovia run (a lovia
    tool that runs lovia-store's Runner); a lovia run started inside is still seen."""
    token = _OWN.set(_lovias_agent())
    try:
        yield
    finally:
        _OWN.reset(token)


def refuse_lovias_runner(store: object) -> None:
    """Raise ``ForeignRunnerError`` when lovia's Runner is what calls ``store``."""
    agent = _lovias_agent()
    if agent is None or agent is _OWN.get():
        return
    kind = type(store)
    known = next((k.__name__ for k in kind.__mro__ if k.__name__ in _DROP_INS), "")
    drop_in = f"lovia_store.integrations.lovia.{_DROP_INS.get(known, 'SQLiteSession')}"
    if known.startswith("InMemory"):
        drop_in += f" (or lovia's own {known})"
    ours = kind.__module__.startswith("lovia_store.")
    name = f"lovia_store.{kind.__qualname__}" if ours else f"{kind.__module__}.{kind.__qualname__}"
    raise ForeignRunnerError(name, drop_in, agent)
