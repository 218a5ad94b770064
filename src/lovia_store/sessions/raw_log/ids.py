"""Time-ordered ids (UUIDv7) for sessions, raw messages and snapshots.

The same kind of id zett-agent uses, so adopted and new records look alike;
time-ordered, so they sort by creation and index well. Python 3.11 has no
``uuid.uuid7``, hence this small generator (RFC 9562, section 5.7).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import uuid

__all__ = ["new_uuid7", "record_id"]

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def new_uuid7() -> str:
    """A new UUIDv7 string; ids made in one process increase strictly.

    Within one millisecond the 12 ``rand_a`` bits are a counter seeded at
    random (RFC 9562, method 1), so a burst of ids keeps its order.
    """
    global _last_ms, _counter
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms > _last_ms:
            _last_ms = ms
            _counter = int.from_bytes(os.urandom(2), "big") & 0x7FF
        else:
            _counter += 1
            if _counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                _last_ms += 1
                _counter = 0
        ms, counter = _last_ms, _counter
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand_b
    return str(uuid.UUID(int=value))


_RECORD_NAMESPACE = uuid.UUID("6c6f7669-612d-7374-6f72-652d72617700").bytes


def record_id(session_id: str, sequence: int) -> str:
    """The stable id of a raw message stored without one (written by lovia's API).

    Derived from its key, so the same row always shows the same id: the
    name-based UUIDv5 of ``session_id NUL sequence`` (RFC 9562, section 5.5),
    what ``uuid.uuid5`` gives, formatted directly (a page computes one per row).
    """
    name = f"{session_id}\x00{sequence}".encode()
    digest = bytearray(hashlib.sha1(_RECORD_NAMESPACE + name, usedforsecurity=False).digest()[:16])
    digest[6] = digest[6] & 0x0F | 0x50  # version 5
    digest[8] = digest[8] & 0x3F | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
