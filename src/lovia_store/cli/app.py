"""The ``lovia-store`` command group, and how its outcomes become exit codes.

The exit codes are a contract (docs/cli.md): a deploy probe running
``lovia-store check`` must tell "needs upgrade" (1) from "cannot connect" (3)
and from "a newer lovia-store wrote it" (4).
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import traceback
from collections.abc import Sequence

import click

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
from .options import URL_HELP
from .output import Output, ReaderGone

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


# Each command's module, imported when that command runs (or help lists it): `check`
# loads neither the session store nor the entry models that `show` needs.
_COMMANDS = {
    "upgrade": ".schema_commands:upgrade_command",
    "check": ".schema_commands:check_command",
    "sessions": ".browse:sessions_command",
    "show": ".browse:show_command",
    "export": ".lifecycle_commands:export_command",
    "import": ".lifecycle_commands:import_command",
    "copy": ".lifecycle_commands:copy_command",
    "prune": ".prune_command:prune_command",
    "rekey": ".rekey_command:rekey_command",
    "stats": ".stats_command:stats_command",
    "tenants": ".rls_command:tenants_command",
}


class _Commands(click.Group):
    """A group whose commands (but ``demo``) are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _COMMANDS:
            module, name = _COMMANDS[cmd_name].split(":")
            self.add_command(getattr(importlib.import_module(module, __package__), name))
        return self.commands.get(cmd_name)


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    # Here, not at the top: reading the installed metadata costs every other command.
    from .._version import __version__

    click.echo(f"lovia-store {__version__}")
    ctx.exit()


@click.group(
    cls=_Commands,
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
@click.option(
    "-V",
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_show_version,
    help="Show the version and exit.",
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
