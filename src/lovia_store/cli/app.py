"""The ``lovia-store`` command group, and how its outcomes become exit codes.

The exit codes are a contract (docs/cli.md): a deploy probe running
``lovia-store check`` must tell "needs upgrade" (1) from "cannot connect" (3)
and from "a newer lovia-store wrote it" (4).
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Sequence

import click

from .._version import __version__
from ..errors import (
    CounterMismatchError,
    LoviaStoreError,
    MissingDriverError,
    SchemaNotCurrentError,
    SchemaVersionError,
    StoreBusyError,
    StoreUnavailableError,
    UserError,
)
from .browse import sessions_command, show_command
from .lifecycle_commands import copy_command, export_command, import_command
from .options import URL_HELP
from .output import Output, ReaderGone
from .prune_command import prune_command
from .schema_commands import check_command, upgrade_command
from .stats_command import stats_command

__all__ = ["EXIT_CODES", "cli", "exit_code", "main"]

OK, NEEDS_UPGRADE, USAGE, UNREACHABLE, NEWER_SCHEMA, FAILED = range(6)
EXIT_CODES = {
    OK: "ok",
    NEEDS_UPGRADE: "needs_upgrade",
    USAGE: "usage",
    UNREACHABLE: "unreachable",
    NEWER_SCHEMA: "newer_schema",
    FAILED: "failed",
}
READER_GONE = 128 + signal.SIGPIPE  # what a shell reports for a tool that SIGPIPE ended
INTERRUPTED = 128 + signal.SIGINT


def exit_code(error: LoviaStoreError) -> int:
    """The documented exit code for a failure (the order matters: subclasses first)."""
    if isinstance(error, SchemaVersionError):
        return NEWER_SCHEMA
    if isinstance(error, SchemaNotCurrentError):
        return NEEDS_UPGRADE
    if isinstance(error, StoreUnavailableError | StoreBusyError | MissingDriverError):
        return UNREACHABLE
    if isinstance(error, UserError):
        return USAGE
    return FAILED


def _error_document(error: LoviaStoreError, code: int) -> dict[str, object]:
    document: dict[str, object] = {
        "status": EXIT_CODES[code],
        "error": type(error).__name__,
        "message": str(error),
    }
    for name in ("database", "store", "found", "expected", "known", "retry_safe"):
        if hasattr(error, name):
            document[name] = getattr(error, name)
    if isinstance(error, CounterMismatchError):
        document["mismatches"] = [m.model_dump(mode="json") for m in error.mismatches]
    return document


@click.group(
    epilog=f"{URL_HELP}\n\n"
    "\b\nExit codes:\n"
    "  0  ok\n"
    "  1  the database needs `lovia-store upgrade` (or `show` found no such session)\n"
    "  2  usage: a wrong option, argument or URL\n"
    "  3  the database cannot be reached, or is not a database\n"
    "  4  a newer lovia-store wrote the database: upgrade lovia-store\n"
    "  5  any other failure (the message says which; for `check`, counters that\n"
    "     disagree with their rows)\n"
    "\nDocumented in docs/cli.md.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(
    __version__, "-V", "--version", prog_name="lovia-store", message="%(prog)s %(version)s"
)
def cli() -> None:
    """Durable conversation history and run checkpoints for LLM agents."""


@cli.command("demo", short_help="Watch a run crash and resume from its checkpoint.")
@click.argument("target", required=False)
@click.option(
    "--force",
    is_flag=True,
    help="Use a database that already exists: the demo adds a session and a run of its "
    "own and changes nothing else.",
)
def demo_command(target: str | None, force: bool) -> int:
    """Watch a run crash mid-way and resume from its checkpoint (the main job).

    TARGET is a new SQLite file or a database URL to run it on (default: a
    temporary file, removed at the end); an existing one only with --force.
    """
    from ..demo import main as demo

    try:
        return demo([*(["--force"] if force else []), *(["--", target] if target else [])])
    except BrokenPipeError as exc:  # the demo prints as it goes, with print()
        raise ReaderGone from exc


for command in (
    upgrade_command,
    check_command,
    sessions_command,
    show_command,
    export_command,
    import_command,
    copy_command,
    prune_command,
    stats_command,
):
    cli.add_command(command)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor (an in-process test's capture)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``lovia-store ARGV`` and return its exit code (the console script's entry)."""
    output = Output()
    try:
        result = cli.main(
            args=None if argv is None else list(argv),
            prog_name="lovia-store",
            standalone_mode=False,
            obj=output,
        )
    except click.ClickException as exc:  # a wrong option or argument: usage, on stderr
        exc.show()
        return exc.exit_code
    except click.Abort:
        output.note("lovia-store: interrupted")
        return INTERRUPTED
    except ReaderGone:  # `lovia-store sessions | head`: the reader has what it wanted
        _quiet_stdout()
        return READER_GONE
    except LoviaStoreError as exc:
        code = exit_code(exc)
        output.note(f"lovia-store: {exc}")
        if output.json_mode:
            try:
                output.json(_error_document(exc, code))
            except ReaderGone:
                _quiet_stdout()
        return code
    except Exception:  # a bug: show where, but never exit 1, which means "needs upgrade"
        output.note("lovia-store: unexpected error (a bug in lovia-store):")
        traceback.print_exc()
        return FAILED
    return result if isinstance(result, int) else OK
