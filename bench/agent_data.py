"""A realistic agent dataset: coding and research sessions whose tool outputs are large
and repeat, generated deterministically from real text (issue 33's bench).

bench/data.py's runs (1.8 KB outputs from a 257-blob pool) say what a store costs per
call; they say nothing of what it stores. Here the tool outputs are what agents
really read: source files of the installed packages (2-60 KB, numbered lines as a
coding agent's read tool shows them), grep and ls over them, package pages fetched
as HTML, JSON query results and test runs, between ordinary user and assistant text.

What repeats, and why it does in real use:

- **Files.** A coding session works in one project (an installed package) and picks
  the file to read by a Zipf law over that project's files (the same ranking for
  every session on the project): the popular files are read many times, within a
  session and across sessions. A file edited in a session reads back changed (one
  line) for the rest of it: near-duplicates that only compression can help.
- **Pages, queries, greps, listings.** Research sessions fetch pages (Zipf over all
  pages, one ranking for everyone) and run queries (Zipf over a pool): the same page
  or query gives the same output. Greps and listings repeat the same way per project.
- **lovia's own Runner** keeps a tool's return value as ``raw`` beside its text when
  the text is at most 16,000 characters: a string result is stored twice in one
  entry, a JSON result once as text and once as structure. Entries here follow it.
- Everything else is distinct: call ids, arguments, user and assistant text (slices of
  the packages' own prose), reasoning with its provider's signature (base64), test
  runs, diffs.

Every session is a function of ``(seed, index)`` alone: session 7 is the same at any
scale, and the same on every machine with the same packages installed (the corpus's
fingerprint, in ``describe``, says whether it is). Entries are lovia's serialized
dicts; each store converts them with its own ``entry_from_dict`` (bench/backends).
"""

from __future__ import annotations

import base64
import bisect
import difflib
import hashlib
import html
import itertools
import json
import random
import re
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

Entry = dict[str, Any]
Run = list[Entry]

SEED = 33
PROJECTS = ("sqlalchemy", "pydantic", "rich", "lovia", "pip", "alembic")
"""The packages coding sessions work in (those missing from the environment are skipped)."""
_SUFFIXES = (".py", ".pyi", ".md", ".rst", ".txt", ".toml", ".cfg")
_MIN_FILE, _MAX_FILE = 2_000, 60_000
_KEEP_RAW_MAX_CHARS = 16_000  # lovia 0.9's Runner drops ``raw`` above this (runtime/tool_calls)
_ZIPF = 1.1
_QUERIES = 60
_GREP_PATTERNS = (
    "def __init__",
    "import ",
    "return None",
    "raise ",
    "class ",
    "async def",
    "self._",
    "TODO",
    "Optional[",
    "isinstance(",
    "@property",
    "yield ",
    "lambda",
    "except ",
    "__all__",
    "logger",
)


@dataclass(frozen=True)
class Corpus:
    """The real text sessions are made of, read once per process."""

    files: dict[str, list[tuple[str, str]]]  # project -> [(path, text)], ranked by popularity
    pages: list[tuple[str, str, str]]  # (url, title, text), ranked by popularity
    prose: str
    fingerprint: str

    @property
    def projects(self) -> list[str]:
        return list(self.files)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


@cache
def corpus() -> Corpus:
    """Text files of the installed packages (``PROJECTS``) and their dist-info pages."""
    root = Path(sysconfig.get_paths()["purelib"])
    digest = hashlib.sha256()
    files: dict[str, list[tuple[str, str]]] = {}
    for project in PROJECTS:
        found = []
        for path in sorted((root / project).rglob("*")):
            if path.suffix not in _SUFFIXES or not path.is_file():
                continue
            if not _MIN_FILE <= path.stat().st_size <= _MAX_FILE:
                continue
            text = _read(path)
            if text is not None:
                found.append((str(path.relative_to(root)), text))
        if found:
            random.Random(f"{SEED}:rank:{project}").shuffle(found)
            files[project] = found
    pages = []
    prose_parts = []
    for metadata in sorted(root.glob("*.dist-info/METADATA")):
        text = _read(metadata)
        if text is None:
            continue
        headers, _, body = text.partition("\n\n")
        name = re.search(r"^Name: (.+)$", headers, re.M)
        if name is None or len(body) < 2_000:
            continue
        project = name.group(1).strip()
        pages.append((f"https://pypi.org/project/{project}/", project, body))
        prose_parts.append(body)
    random.Random(f"{SEED}:rank:pages").shuffle(pages)
    for project, found in files.items():
        digest.update(project.encode())
        for path, text in found:
            digest.update(f"{path}:{len(text)}".encode())
    for url, _, text in pages:
        digest.update(f"{url}:{len(text)}".encode())
    prose = re.sub(r"\s+", " ", " ".join(prose_parts))
    return Corpus(files, pages, prose, digest.hexdigest()[:12])


@lru_cache(maxsize=64)
def _zipf_weights(n: int) -> tuple[float, ...]:
    return tuple(itertools.accumulate(1.0 / (rank + 1) ** _ZIPF for rank in range(n)))


def zipf(rng: random.Random, n: int) -> int:
    """A rank in ``range(n)``, rank 0 the most likely (Zipf, s=1.1)."""
    weights = _zipf_weights(n)
    return min(bisect.bisect(weights, rng.random() * weights[-1]), n - 1)


# -- tool outputs (identical for identical calls) ------------------------------


def numbered(text: str) -> str:
    """A file as a coding agent's read tool shows it: numbered lines."""
    return "".join(f"{n:>6}\t{line}\n" for n, line in enumerate(text.splitlines(), 1))


@lru_cache(maxsize=512)
def grep(project: str, pattern: str, limit: int = 200) -> str:
    lines = []
    for path, text in sorted(corpus().files[project]):
        for number, line in enumerate(text.splitlines(), 1):
            if pattern in line:
                lines.append(f"{path}:{number}:{line.rstrip()[:200]}")
                if len(lines) == limit:
                    return "\n".join(lines) + f"\n[results truncated at {limit} matches]"
    return "\n".join(lines) if lines else "No matches found"


@lru_cache(maxsize=256)
def listing(project: str, depth: int) -> str:
    """``ls -lR``-like: every file under the project's folder ``depth`` levels down."""
    rows = []
    for path, text in sorted(corpus().files[project]):
        parts = path.split("/")
        if len(parts) <= depth + 2:
            rows.append(f"-rw-r--r--  1 agent agent {len(text.encode()):>8}  {path}")
    return "\n".join(rows) + f"\n{len(rows)} files"


_PAGE_HEAD = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · PyPI</title>
<link rel="stylesheet" href="/static/css/warehouse-ltr.5f9f5f0a.css">
<link rel="stylesheet" href="/static/css/fontawesome.6002a161.css">
<script defer src="/static/js/warehouse.2b1dd1b5.js"></script>
<script async data-domain="pypi.org" src="https://plausible.io/js/script.js"></script>
</head><body data-controller="viewport-toggle">
<nav class="site-header" aria-label="Main navigation"><ul>
<li><a href="/help/">Help</a></li><li><a href="/sponsors/">Sponsors</a></li>
<li><a href="/account/login/">Log in</a></li><li><a href="/account/register/">Register</a></li>
</ul><form class="search-form" action="/search/" role="search">
<input id="search" type="text" name="q" placeholder="Search projects" aria-label="Search PyPI">
</form></nav>
<main id="content"><div class="banner"><h1 class="package-header__name">{title}</h1>
<p class="package-header__date">Released: <time datetime="2025-06-11">Jun 11, 2025</time></p>
<div class="sidebar-section"><h3>Navigation</h3><ul class="vertical-tabs__tabs">
<li><a href="#description" class="vertical-tabs__tab--is-active">Project description</a></li>
<li><a href="#history">Release history</a></li><li><a href="#files">Download files</a></li>
</ul></div></div><div class="project-description" id="description">
"""
_PAGE_FOOT = """</div></main><footer class="footer"><div class="footer__logo"></div>
<ul><li><a href="/help/">Help</a></li>
<li><a href="/help/#installing">Installing packages</a></li>
<li><a href="/help/#uploading">Uploading packages</a></li>
<li><a href="/policy/terms-of-use/">Terms</a></li>
<li><a href="https://status.python.org/">Status</a></li><li><a href="/security/">Security</a></li>
</ul><p>&copy; 2025 Python Software Foundation.
Developed and maintained by the Python community.</p>
</footer></body></html>
"""


@lru_cache(maxsize=512)
def page(index: int) -> str:
    """Page ``index`` of the corpus as fetched HTML (boilerplate around its description)."""
    _, title, text = corpus().pages[index]
    blocks = []
    for block in re.split(r"\n\s*\n", text):
        block = block.strip()
        if not block:
            continue
        if block.startswith("#"):
            blocks.append(f"<h2>{html.escape(block.lstrip('#').strip())}</h2>")
        elif block.startswith(("    ", "```", ">>>", "$ ")):
            blocks.append(f'<pre><code class="language-python">{html.escape(block)}</code></pre>')
        else:
            blocks.append(f"<p>{html.escape(' '.join(block.split()))}</p>")
    return _PAGE_HEAD.format(title=html.escape(title)) + "\n".join(blocks) + _PAGE_FOOT


_STATUSES = ("active", "active", "active", "trialing", "past_due", "canceled")
_PLANS = ("free", "team", "team", "business", "enterprise")
_COUNTRIES = ("FR", "DE", "US", "US", "GB", "JP", "BR", "IN", "CA", "ES", "IT", "NL")


@lru_cache(maxsize=256)
def query(index: int) -> tuple[str, dict[str, Any]]:
    """Query ``index`` of the pool: its SQL and its result (the same every time)."""
    rng = random.Random(f"{SEED}:query:{index}")
    words = corpus().prose.split()
    status = rng.choice(_STATUSES)
    sql = (
        "SELECT id, name, email, plan, status, country, mrr_cents, created_at, tags "
        f"FROM accounts WHERE status = '{status}' AND created_at >= '2025-0{rng.randint(1, 9)}-01' "
        f"ORDER BY mrr_cents DESC LIMIT {rng.choice((20, 50, 100, 200))}"
    )
    rows = []
    for _ in range(rng.choice((3, 8, 20, 40, 60, 120))):
        first, last = rng.choice(words).strip(".,:;()`*"), rng.choice(words).strip(".,:;()`*")
        rows.append(
            {
                "id": rng.randint(10_000, 999_999),
                "name": f"{first.title()} {last.title()}"[:40],
                "email": f"{first.lower()[:12]}.{last.lower()[:12]}@example.com",
                "plan": rng.choice(_PLANS),
                "status": status,
                "country": rng.choice(_COUNTRIES),
                "mrr_cents": rng.randint(0, 250_000),
                "created_at": f"2025-{rng.randint(1, 12):02}-{rng.randint(1, 28):02}T"
                f"{rng.randint(0, 23):02}:{rng.randint(0, 59):02}:{rng.randint(0, 59):02}Z",
                "tags": rng.sample(["beta", "sso", "vip", "churn-risk", "eu", "annual"], 2),
            }
        )
    return sql, {"columns": list(rows[0]), "rows": rows, "row_count": len(rows)}


# -- sessions -------------------------------------------------------------------


@dataclass
class Session:
    """One generated session: its runs (lists of lovia's entry dicts) and what made it."""

    id: str
    kind: str  # "coding" | "research"
    project: str
    runs: list[Run] = field(default_factory=list)


class _Writer:
    """The state of one session being generated (its rng, its edited files)."""

    def __init__(self, seed: int, index: int) -> None:
        self.rng = random.Random(f"{seed}:session:{index}")
        self.corpus = corpus()
        self.index = index
        self.edited: dict[str, str] = {}
        self.thinking = self.rng.random() < 0.4

    # text

    def prose(self, low: int, high: int) -> str:
        text = self.corpus.prose
        length = self.rng.randint(low, high)
        start = self.rng.randrange(0, max(1, len(text) - length))
        start = text.find(" ", start) + 1
        return text[start : start + length].strip()

    def call_id(self) -> str:
        return f"toolu_{self.rng.getrandbits(96):024x}"

    def reasoning(self) -> Entry:
        signature = base64.b64encode(self.rng.randbytes(self.rng.randint(200, 1_200))).decode()
        return {
            "type": "reasoning",
            "content": self.prose(200, 2_500),
            "id": None,
            "provider": "anthropic",
            "metadata": {"signature": signature},
        }

    def assistant(self, low: int, high: int) -> Entry:
        return {
            "type": "assistant_text",
            "content": self.prose(low, high),
            "id": f"msg_{self.rng.getrandbits(96):024x}",
        }

    # tools

    def file(self, project: str) -> tuple[str, str]:
        files = self.corpus.files[project]
        path, text = files[zipf(self.rng, len(files))]
        return path, self.edited.get(path, text)

    def tool(self, session: Session) -> tuple[str, dict[str, Any], Any]:
        """One tool call: its name, its arguments and what the tool returned."""
        rng, project = self.rng, session.project
        roll = rng.random()
        if session.kind == "coding":
            if roll < 0.45:
                path, text = self.file(project)
                return "read_file", {"file_path": path}, numbered(text)
            if roll < 0.60:
                pattern = _GREP_PATTERNS[zipf(rng, len(_GREP_PATTERNS))]
                return "grep", {"pattern": pattern, "path": project}, grep(project, pattern)
            if roll < 0.67:
                depth = zipf(rng, 3)
                return "ls", {"path": project, "depth": depth}, listing(project, depth)
            if roll < 0.80:
                return self.edit(project)
            if roll < 0.90:
                return self.run_tests(project)
            if roll < 0.95 and self.edited:
                return self.diff(project)
            index = zipf(rng, len(self.corpus.pages))
            return "web_fetch", {"url": self.corpus.pages[index][0]}, page(index)
        if roll < 0.40:
            index = zipf(rng, len(self.corpus.pages))
            return "web_fetch", {"url": self.corpus.pages[index][0]}, page(index)
        if roll < 0.60:
            return self.search()
        if roll < 0.85:
            sql, result = query(zipf(rng, _QUERIES))
            return "sql_query", {"query": sql}, result
        path, text = self.file(project)
        return "read_file", {"file_path": path}, numbered(text)

    def edit(self, project: str) -> tuple[str, dict[str, Any], Any]:
        path, text = self.file(project)
        lines = text.splitlines(keepends=True)
        number = self.rng.randrange(len(lines))
        old = lines[number]
        new = old.rstrip("\n") + f"  # edited in session {self.index}\n"
        lines[number] = new
        self.edited[path] = "".join(lines)
        arguments = {"file_path": path, "old_string": old, "new_string": new}
        return "edit_file", arguments, f"The file {path} has been updated (1 replacement)."

    def diff(self, project: str) -> tuple[str, dict[str, Any], Any]:
        originals = dict(self.corpus.files[project])
        chunks = []
        for path, text in sorted(self.edited.items()):
            chunks += difflib.unified_diff(
                originals[path].splitlines(keepends=True),
                text.splitlines(keepends=True),
                f"a/{path}",
                f"b/{path}",
            )
        return "bash", {"command": "git diff"}, "".join(chunks) or "(no changes)"

    def run_tests(self, project: str) -> tuple[str, dict[str, Any], Any]:
        rng = self.rng
        path, text = self.file(project)
        names = re.findall(r"^\s*(?:async )?def (\w+)", text, re.M) or ["module"]
        stem = Path(path).stem
        lines = [
            "============================= test session starts ==============================",
            "platform linux -- Python 3.11.2, pytest-8.3.4, pluggy-1.5.0",
            f"rootdir: /home/agent/{project}",
            "plugins: asyncio-0.24.0, xdist-3.6.1, hypothesis-6.122.3",
            f"collected {len(names)} items",
            "",
        ]
        failed = []
        for n, name in enumerate(names, 1):
            ok = rng.random() > 0.08
            if not ok:
                failed.append(name)
            outcome = "PASSED" if ok else "FAILED"
            lines.append(
                f"tests/test_{stem}.py::test_{name} {outcome} [{n * 100 // len(names):>3}%]"
            )
        source = text.splitlines()
        for name in failed[:3]:
            at = rng.randrange(len(source))
            lines += ["", f"____ test_{name} ____", ""]
            lines += [f"    {line}" for line in source[at : at + rng.randint(8, 30)]]
            lines.append(f"E   AssertionError: assert {rng.randint(0, 99)} == {rng.randint(0, 99)}")
        passed, seconds = len(names) - len(failed), rng.uniform(0.4, 40)
        lines.append(f"===== {len(failed)} failed, {passed} passed in {seconds:.2f}s =====")
        return "bash", {"command": f"pytest -q tests/test_{stem}.py"}, "\n".join(lines)

    def search(self) -> tuple[str, dict[str, Any], Any]:
        rng, pages = self.rng, self.corpus.pages
        words = self.prose(20, 60)
        hits = []
        for _ in range(rng.randint(5, 10)):
            url, title, text = pages[zipf(rng, len(pages))]
            at = rng.randrange(max(1, len(text) - 400))
            hits.append(
                {"title": title, "url": url, "snippet": " ".join(text[at : at + 300].split())}
            )
        return "web_search", {"query": words}, {"query": words, "results": hits}

    # runs

    def result(self, call_id: str, returned: Any) -> Entry:
        """The entry lovia's Runner records for a tool's return value."""
        output = returned if isinstance(returned, str) else json.dumps(returned, ensure_ascii=False)
        raw = returned if len(output) <= _KEEP_RAW_MAX_CHARS else None
        return {
            "type": "tool_result",
            "call_id": call_id,
            "output": output,
            "raw": raw,
            "is_error": False,
        }

    def run(self, session: Session, first: bool) -> Run:
        rng = self.rng
        content = self.prose(300, 1_500) if first else self.prose(40, 600)
        if first and rng.random() < 0.25:  # a pasted traceback or excerpt
            _, text = self.file(session.project)
            at = rng.randrange(max(1, len(text) - 4_000))
            content += "\n\n```\n" + text[at : at + rng.randint(1_000, 4_000)] + "\n```"
        run: Run = [{"type": "input", "role": "user", "content": content}]
        turns = min(1 + int(rng.expovariate(1 / 4)), 24)
        for _ in range(turns):
            if self.thinking:
                run.append(self.reasoning())
            if rng.random() < 0.3:
                run.append(self.assistant(40, 400))
            calls = [
                self.tool(session) for _ in range(1 if rng.random() < 0.8 else rng.randint(2, 3))
            ]
            ids = [self.call_id() for _ in calls]
            for call_id, (name, arguments, _) in zip(ids, calls, strict=True):
                run.append(
                    {
                        "type": "tool_call",
                        "call_id": call_id,
                        "name": name,
                        "arguments": json.dumps(arguments, ensure_ascii=False),
                    }
                )
            for call_id, (_, _, returned) in zip(ids, calls, strict=True):
                run.append(self.result(call_id, returned))
        if self.thinking:
            run.append(self.reasoning())
        run.append(self.assistant(300, 3_000))
        return run


def session(index: int, seed: int = SEED) -> Session:
    """Session ``index``: 70% coding in one project, 30% research; 3-20 runs."""
    writer = _Writer(seed, index)
    rng, projects = writer.rng, writer.corpus.projects
    kind = "coding" if rng.random() < 0.7 else "research"
    made = Session(f"session-{index:05}", kind, projects[zipf(rng, len(projects))])
    count = rng.randint(4, 20) if kind == "coding" else rng.randint(3, 10)
    made.runs = [writer.run(made, first=n == 0) for n in range(count)]
    return made


def sessions(count: int, start: int = 0, seed: int = SEED) -> list[Session]:
    return [session(index, seed) for index in range(start, start + count)]


def describe(made: Iterable[Session]) -> dict[str, Any]:
    """Counts and bytes of a set of sessions (UTF-8), and how many outputs are distinct."""
    made = list(made)
    outputs: dict[str, int] = {}
    entries = runs = entry_bytes = output_bytes = within = across = 0
    by_tool: dict[str, list[int]] = {}
    names: dict[str, str] = {}
    digest = hashlib.sha256()
    for one in made:
        runs += len(one.runs)
        seen: set[str] = set()
        for run in one.runs:
            for entry in run:
                entries += 1
                encoded = json.dumps(entry, ensure_ascii=False).encode()
                entry_bytes += len(encoded)
                digest.update(encoded)
                if entry["type"] == "tool_call":
                    names[entry["call_id"]] = entry["name"]
                if entry["type"] == "tool_result":
                    output = entry["output"]
                    size = len(output.encode())
                    output_bytes += size
                    if output in seen:
                        within += size
                    elif output in outputs:
                        across += size
                    seen.add(output)
                    outputs[output] = size
                    by_tool.setdefault(names[entry["call_id"]], []).append(size)
    return {
        "sessions": len(made),
        "coding": sum(one.kind == "coding" for one in made),
        "runs": runs,
        "entries": entries,
        "entry_bytes": entry_bytes,
        "tool_results": sum(len(sizes) for sizes in by_tool.values()),
        "output_bytes": output_bytes,
        "distinct_outputs": len(outputs),
        "distinct_output_bytes": sum(outputs.values()),
        "repeated_in_session_bytes": within,
        "repeated_across_sessions_bytes": across,
        "by_tool": {name: (len(sizes), sum(sizes)) for name, sizes in sorted(by_tool.items())},
        "corpus": corpus().fingerprint,
        "digest": digest.hexdigest()[:12],
    }
