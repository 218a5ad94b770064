"""What the report says about the machine, the packages and the databases."""

from __future__ import annotations

import os
import platform
import sqlite3
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES = (
    "lovia-store",
    "lovia",
    "zett-agent",
    "SQLAlchemy",
    "aiosqlite",
    "asyncpg",
    "psycopg",
    "pydantic",
    "orjson",
)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    return "?"


def filesystem(path: Path) -> str:
    """Type and device of the mount holding ``path`` (fsync cost depends on it)."""
    best, found = "", "?"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            device, mount, fstype = line.split()[:3]
            if str(path.resolve()).startswith(mount) and len(mount) > len(best):
                best, found = mount, f"{fstype} ({device} on {mount})"
    except OSError:
        pass
    return found


def _sqlite_default_sync() -> str:
    conn = sqlite3.connect(":memory:")
    try:
        return {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(
            conn.execute("PRAGMA synchronous").fetchone()[0], "?"
        )
    finally:
        conn.close()


def machine_info(tmp_root: Path) -> dict[str, str]:
    """nproc, CPU, memory, OS, Python, SQLite, and where the SQLite files live."""
    return {
        "nproc": str(len(os.sched_getaffinity(0))),
        "CPU": _cpu_model(),
        "memory": _memory(),
        "OS": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        "SQLite (sqlite3 module)": sqlite3.sqlite_version,
        "SQLite default synchronous": _sqlite_default_sync(),
        "SQLite files on": filesystem(tmp_root),
    }


def package_versions() -> dict[str, str]:
    """Installed versions of the packages under test and their drivers."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def source_revision(root: Path) -> str:
    """The lovia-store commit measured, and whether ``src/`` had uncommitted changes."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=30, check=False
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD")
    if not commit:
        return "?"
    return commit + (
        " + uncommitted changes in src/" if git("status", "--porcelain", "src") else ""
    )
