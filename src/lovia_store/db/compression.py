"""Zstandard, the compression of stored documents (``lovia_store.db.documents``).

Python 3.14's ``compression.zstd``, else the ``zstandard`` package (a core
dependency before 3.14), imported when a document is first long enough to compress.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["LEVEL", "compress", "decompress"]

LEVEL = 3
"""3.95x at 228 MB/s on tool outputs (docs/documents.md has the measurement)."""

_local = threading.local()


def compress(data: bytes) -> bytes:
    """``data`` packed at ``LEVEL``."""
    return _zstd()[0](data)


def decompress(data: bytes) -> bytes:
    """What ``compress`` packed; ``ValueError`` for anything else."""
    try:
        return _zstd()[1](data)
    except Exception as exc:  # zstandard.ZstdError, compression.zstd.ZstdError
        raise ValueError(f"not Zstandard data: {exc}") from None


_ZSTD: list[tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]] = []


def _zstd() -> tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]:
    """Python 3.14's ``compression.zstd``, else the ``zstandard`` package, imported once."""
    if not _ZSTD:
        try:
            from compression import zstd  # type: ignore[import-not-found]  # Python 3.14+

            _ZSTD.append((lambda data: zstd.compress(data, level=LEVEL), zstd.decompress))
        except ImportError:
            _ZSTD.append((_zstandard_compress, _zstandard_decompress))
    return _ZSTD[0]


def _zstandard_compress(data: bytes) -> bytes:
    # One context per thread: zstandard's are not thread-safe, and a new one costs
    # a quarter of compressing a 40 KB output.
    compressor = getattr(_local, "compressor", None)
    if compressor is None:
        import zstandard

        compressor = _local.compressor = zstandard.ZstdCompressor(level=LEVEL)
    packed: bytes = compressor.compress(data)
    return packed


def _zstandard_decompress(data: bytes) -> bytes:
    decompressor = getattr(_local, "decompressor", None)
    if decompressor is None:
        import zstandard

        decompressor = _local.decompressor = zstandard.ZstdDecompressor()
    unpacked: bytes = decompressor.decompress(data)
    return unpacked
