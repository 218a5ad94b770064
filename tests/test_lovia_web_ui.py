"""lovia's web UI on our stores, in a real headless Chromium, transcripts in PostgreSQL.

lovia 0.9.119's own app (``create_app`` with a ``ChatStore`` whose session and
checkpointer are the integration's, on one ``Database``) is served by uvicorn in
a thread; Debian's chromium, driven by selenium through Debian's chromedriver,
sends a message, edits it and resends it, then regenerates the answer. What
PostgreSQL holds is then read back through our native API. The model is lovia's
``ScriptedProvider``: it pops a queue, so a stray extra model call fails the run.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from lovia import Agent, tool
from lovia.testing import ScriptedProvider, call, text
from lovia.web import create_app
from lovia.web.store import ChatStore
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

import lovia_store
from lovia_store import AssistantTextEntry, Database, InputEntry
from lovia_store.integrations.lovia import SQLCheckpointer, SQLSession

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Flags for a machine with no display, no internet and no sandboxing privileges:
# nothing phones home, nothing is downloaded, and every run starts from nothing.
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
)
WAIT = 20.0  # seconds for any one thing to appear in the page


@tool
def weather(city: str) -> str:
    """Current weather for a city."""
    return f"rain in {city}"


@contextmanager
def chromium(profile: Path) -> Iterator[WebDriver]:
    """Debian's chromium through Debian's chromedriver; both paths explicit, so selenium's
    manager never looks for (or downloads) a browser or a driver."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    if missing:  # .ci/run installs them: a missing browser is a broken machine, not a skip
        pytest.fail(f"{', '.join(missing)} missing: apt-get install -y chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()


@contextmanager
def served(pg_url: str, meta_path: Path, agent: Agent[Any]) -> Iterator[str]:
    """lovia's app on our stores, served on 127.0.0.1 in a thread with its own event loop
    (asyncpg's connections belong to the loop that opened them); yields the base URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server: uvicorn.Server | None = None
    ready = threading.Event()
    failure: list[BaseException] = []

    async def run() -> None:
        nonlocal server
        async with Database(pg_url) as db:  # one Database: session and checkpointer share it
            store = ChatStore(SQLSession(db), meta_path=meta_path, checkpointer=SQLCheckpointer(db))
            app = create_app(agent, store=store, titles=False)  # a title would be a model call
            config = uvicorn.Config(app, log_level="warning", lifespan="on")
            server = uvicorn.Server(config)
            ready.set()
            await server.serve(sockets=[listener])

    def main() -> None:
        try:
            asyncio.run(run())
        except BaseException as exc:
            failure.append(exc)
        finally:
            ready.set()

    thread = threading.Thread(target=main, name="lovia-web", daemon=True)
    thread.start()
    try:
        assert ready.wait(WAIT) and server is not None, f"server did not start: {failure}"
        for _ in range(int(WAIT * 20)):
            if server.started or failure:
                break
            threading.Event().wait(0.05)
        assert server.started, f"uvicorn did not start: {failure}"
        yield f"http://127.0.0.1:{port}"
    finally:
        if server is not None:
            server.should_exit = True
        thread.join(WAIT)
        listener.close()
    assert not thread.is_alive(), "the server thread did not stop"
    assert not failure, f"the server failed: {failure[0]!r}"


def turns(driver: WebDriver) -> list[tuple[str, str]]:
    """The transcript as rendered: (role, text) of each turn, in order."""
    shown = []
    for turn in driver.find_elements(By.CSS_SELECTOR, "#transcript .turn"):
        classes = (turn.get_attribute("class") or "").split()
        role = "user" if "user" in classes else "assistant" if "assistant" in classes else "?"
        bodies = turn.find_elements(By.CSS_SELECTOR, ".body")
        shown.append((role, " ".join(b.text.strip() for b in bodies if b.text.strip())))
    return shown


def wait_for_transcript(driver: WebDriver, expected: list[tuple[str, str]]) -> None:
    """Until the page shows exactly ``expected`` and the run is over (the edit control
    returns only when nothing streams)."""

    def settled(d: WebDriver) -> bool:
        try:
            return turns(d) == expected and bool(d.find_elements(By.CSS_SELECTOR, ".btn-edit"))
        except StaleElementReferenceException:  # re-rendered while read: look again
            return False

    try:
        WebDriverWait(driver, WAIT, poll_frequency=0.1).until(settled)
    except WebDriverException as exc:
        raise AssertionError(f"page shows {turns(driver)}, expected {expected}") from exc


def hover_and_click(driver: WebDriver, reveal: str, control: str) -> None:
    """The edit and regenerate controls show on hover only: hover as a user does, then click."""
    target = driver.find_element(By.CSS_SELECTOR, reveal)
    ActionChains(driver).move_to_element(target).perform()
    button = driver.find_element(By.CSS_SELECTOR, control)
    WebDriverWait(driver, WAIT).until(lambda _: button.value_of_css_property("opacity") == "1")
    ActionChains(driver).move_to_element(button).click().perform()


def test_edit_and_resend_and_regenerate_in_a_browser_rewind_the_postgresql_transcript(
    pg_url: str, tmp_path: Path
) -> None:
    scripted = ScriptedProvider(
        [
            call("weather", {"city": "Zürich"}),
            text("Rain in Zürich."),
            text("Sunny in Bern."),  # the edited question's answer
            text("Cloudy in Bern."),  # the regenerated one
        ]
    )
    bot = Agent(name="bot", model=scripted, tools=[weather])
    with (
        tempfile.TemporaryDirectory(prefix="chromium-") as profile,
        served(pg_url, tmp_path / "meta.sqlite3", bot) as base,
        chromium(Path(profile)) as driver,
    ):
        try:
            driver.get(base + "/")
            prompt = WebDriverWait(driver, WAIT).until(
                expected_conditions.element_to_be_clickable((By.ID, "prompt"))
            )
            prompt.send_keys("Weather in Zürich?", Keys.ENTER)
            wait_for_transcript(
                driver, [("user", "Weather in Zürich?"), ("assistant", "Rain in Zürich.")]
            )
            chat_id = driver.execute_script(
                "return new URL(location.href).searchParams.get('session')"
            )
            assert chat_id, "the page names no chat after the first send"

            # Edit and resend the first message: lovia's UI rewinds the chat to before it.
            hover_and_click(driver, "#transcript .turn.user", "#transcript .turn.user .btn-edit")
            editor = driver.find_element(By.CSS_SELECTOR, ".edit-area textarea")
            editor.send_keys(Keys.CONTROL, "a")
            editor.send_keys(Keys.DELETE, "Weather in Bern?", Keys.ENTER)
            wait_for_transcript(
                driver, [("user", "Weather in Bern?"), ("assistant", "Sunny in Bern.")]
            )

            # Regenerate the answer: a rewind to before the last question, resent verbatim.
            hover_and_click(driver, "#transcript .turn.assistant .bubble", ".btn-regen")
            wait_for_transcript(
                driver, [("user", "Weather in Bern?"), ("assistant", "Cloudy in Bern.")]
            )

            # A fresh load renders the chat from what the stores hold, not from the page.
            driver.get(f"{base}/?session={chat_id}")
            wait_for_transcript(
                driver, [("user", "Weather in Bern?"), ("assistant", "Cloudy in Bern.")]
            )
        except BaseException:
            driver.save_screenshot(str(tmp_path / "lovia-web-ui.png"))
            (tmp_path / "lovia-web-ui.html").write_text(driver.page_source, encoding="utf-8")
            raise

    # The model saw only what PostgreSQL held after each rewind: no trace of Zürich.
    assert [[(m.role, m.content) for m in sent] for sent in scripted.calls[2:]] == [
        [("user", "Weather in Bern?")],
        [("user", "Weather in Bern?")],
    ]
    assert len(scripted.calls) == 4, "every scripted answer was asked for, none twice"
    asyncio.run(check_postgresql(pg_url, chat_id))


async def check_postgresql(pg_url: str, chat_id: str) -> None:
    """PostgreSQL holds exactly the rewound-then-resent transcript, read natively: one
    segment through the lovia-style API, two messages and one session through the Raw Log."""
    async with lovia_store.SQLSession(pg_url) as native:
        segments = await native.segments(chat_id)
    assert [s.entries for s in segments] == [
        [
            InputEntry(role="user", content="Weather in Bern?"),
            AssistantTextEntry(content="Cloudy in Bern."),
        ]
    ]
    async with lovia_store.SQLSessionStorage(pg_url) as storage:
        sessions = await storage.list_sessions()
        raw = await storage.list_raw_messages(chat_id)
    assert [(s.session_id, s.message_count) for s in sessions] == [(chat_id, 2)]
    assert [(r.message, r.run_id) for r in raw] == [
        (e, segments[0].run_id) for e in segments[0].entries
    ]
