"""The data's whole life: copy a deployment between databases, export and import,
retention, statistics, the counters' check, rekeying what is stored. Each operation is a
library call first; the command line (``lovia-store copy|export|import|prune|stats|rekey``)
is a thin layer over it.

Export, import and copy share one core: a database's content as a stream of
records (``records``: the versioned, line-oriented format; ``reading``: the
stream, in pages) and an idempotent loader of such a stream (``loading``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import by_name, lazy_names

if TYPE_CHECKING:
    from .copying import CopyReport, SessionCheck, copy_database
    from .counters import CounterMismatch, counter_mismatches
    from .exporting import ExportReport, export
    from .importing import MAX_LINE_BYTES, ImportReport, import_file, read_file
    from .records import FORMAT, VERSION, DestinationConflictError, ExportFormatError
    from .rekeying import RekeyReport, rekey
    from .retention import PruneReport, prune
    from .verify import Summary, Tally, summarize

# Each name's module, imported on first use (PEP 562): ``lovia-store check`` needs the
# counters' check only, not the records, loader and copier the others share. No module
# is named as one of these names (``exporting`` holds ``export``): importing it would bind
# the module here, over the name.
_LAZY: dict[str, str] = by_name(
    {
        ".copying": "CopyReport SessionCheck copy_database",
        ".counters": "CounterMismatch counter_mismatches",
        ".exporting": "ExportReport export",
        ".importing": "MAX_LINE_BYTES ImportReport import_file read_file",
        ".records": "FORMAT VERSION DestinationConflictError ExportFormatError",
        ".rekeying": "RekeyReport rekey",
        ".retention": "PruneReport prune",
        ".verify": "Summary Tally summarize",
    }
)


__getattr__, __dir__ = lazy_names(__name__, _LAZY)


__all__ = [
    "FORMAT",
    "MAX_LINE_BYTES",
    "VERSION",
    "CopyReport",
    "CounterMismatch",
    "DestinationConflictError",
    "ExportFormatError",
    "ExportReport",
    "ImportReport",
    "PruneReport",
    "RekeyReport",
    "SessionCheck",
    "Summary",
    "Tally",
    "copy_database",
    "counter_mismatches",
    "export",
    "import_file",
    "prune",
    "read_file",
    "rekey",
    "summarize",
]
