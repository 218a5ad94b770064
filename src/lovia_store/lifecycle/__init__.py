"""The data's whole life: copy a deployment between databases, export and import,
retention, statistics, the counters' check. Each operation is a library call first; the command line
(``lovia-store copy|export|import|prune|stats``) is a thin layer over it.

Export, import and copy share one core: a database's content as a stream of
records (``records``: the versioned, line-oriented format; ``reading``: the
stream, in pages) and an idempotent loader of such a stream (``loading``).
"""

from .copying import CopyReport, SessionCheck, copy_database
from .counters import CounterMismatch, counter_mismatches
from .export import ExportReport, export
from .importing import MAX_LINE_BYTES, ImportReport, import_file, read_file
from .records import FORMAT, VERSION, DestinationConflictError, ExportFormatError
from .retention import PruneReport, prune
from .verify import Summary, Tally, summarize

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
    "SessionCheck",
    "Summary",
    "Tally",
    "copy_database",
    "counter_mismatches",
    "export",
    "import_file",
    "prune",
    "read_file",
    "summarize",
]
