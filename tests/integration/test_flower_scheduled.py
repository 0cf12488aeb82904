"""Flower's Scheduled page, driven in real headless Chromium against a real ``recur flower``
on a real PostgreSQL store (this run's schema), with a real scheduler and worker where a
job must actually run: what the page shows, what its buttons change in the store, and
what it refuses."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from scheduler.store import DueStore
from scheduler.store.control import JobControl
from tasks.process import process_message
from tests.support.cdp import Browser
from tests.support.flower_process import running_flower
from tests.support.processes import wait_for
from tests.support.scheduler_support import RunLog, worker_env

pytestmark = pytest.mark.services

USER, PASSWORD = "ops", "s3cret-sched"
HOSTILE = "<script>window.__pwned=1</script>\"'&"


@pytest.fixture(scope="module")
def flower(live_services: None, pg_url: str, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[str]:
    """``recur flower`` on this run's PostgreSQL store; its base URL."""
    with running_flower(tmp_path_factory.mktemp("flower"), USER, PASSWORD,
                        RECUR_DATABASE_URL=pg_url) as base:
        yield base


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    b = Browser(tmp_path_factory.mktemp("chromium") / "chromium.log")
    b.login(USER, PASSWORD)
    yield b
    b.close()


@pytest.fixture
def ctl(fresh_pg_url: str, use_store: Callable[[str], None]) -> Iterator[JobControl]:
    """The emptied store, which this process's apply_async writes to."""
    use_store(fresh_pg_url)
    store = DueStore.open(fresh_pg_url)
    yield JobControl(store)
    store.close()


def message(ident: str, user: str, every: float | None = None) -> dict[str, Any]:
    payload = None if every is None else {"every": every, "runs": None}
    return {"id": ident, "user_id": user, "bucket": "medium", "payload": payload}


def later(ident: str, user: str, every: float | None = None) -> None:
    """A job due in an hour, not pulled forward before it."""
    process_message.apply_async((message(ident, user, every),), countdown=3600,
                                job_key=ident, not_before=True)


def keys(b: Browser) -> list[str]:
    return list(b.js("[...document.querySelectorAll('tr.job')].map(r => r.dataset.key)"))


def row(b: Browser, key: str) -> str:
    """The selector of a job's row on the page (by place: the key itself is hostile)."""
    return f"#jobs-table tbody tr:nth-child({keys(b).index(key) + 1})"


def notice(b: Browser) -> str:
    return str(b.js("document.querySelector('#notice')?.textContent ?? ''"))


def test_a_job_is_seen_by_user_and_cancelled_with_its_button(
        flower: str, browser: Browser, ctl: JobControl) -> None:
    later(HOSTILE, "alice")
    later("alice-2", "alice")
    later("bob-1", "bob")
    browser.open(f"{flower}/scheduled?user=alice")
    assert sorted(keys(browser)) == sorted([HOSTILE, "alice-2"])
    # The key is shown as text, exactly, and never ran as markup.
    shown = row(browser, HOSTILE)
    assert browser.js(f"document.querySelector('{shown} .job-key').textContent") == HOSTILE
    assert browser.js("window.__pwned") is None
    assert browser.js("document.querySelector('a.nav-link.active').textContent") == "Scheduled"
    assert browser.js(f"document.querySelector('{shown} .job-lateness').textContent"
                      ).startswith("due in 59m")
    browser.click(f"{shown} button[value=cancel]")
    assert notice(browser).startswith(f"cancelled job {HOSTILE} (it was scheduled")
    assert keys(browser) == ["alice-2"]
    assert ctl.get(HOSTILE) is None
    assert ctl.get("alice-2") is not None and ctl.get("bob-1") is not None


def test_every_job_of_a_user_moved_run_now_and_cancelled_from_the_page(
        flower: str, browser: Browser, ctl: JobControl) -> None:
    for i in range(3):
        later(f"carol-{i}", "carol")
    later("dave-1", "dave")
    browser.open(f"{flower}/scheduled?user=carol")
    browser.type("#user-actions input[name=when]", "3h")
    before = datetime.now(UTC)
    browser.click("#user-actions button[value=reschedule-user]")
    assert notice(browser).startswith("3 scheduled job(s) of user carol now due at")
    for i in range(3):
        moved = ctl.get(f"carol-{i}")
        assert moved is not None and moved.early_at == moved.due_at
        assert before + timedelta(hours=3) <= moved.due_at <= datetime.now(UTC) + timedelta(
            hours=3)
    browser.click("#user-actions button[value=run-now-user]")
    assert notice(browser) == "3 scheduled job(s) of user carol due now"
    assert all((r := ctl.get(f"carol-{i}")) is not None and r.due_at <= datetime.now(UTC)
               for i in range(3))
    browser.click("#user-actions button[value=cancel-user]")
    assert notice(browser) == "cancelled 3 job(s) of user carol: 3 scheduled, 0 dispatched"
    assert keys(browser) == [] and all(ctl.get(f"carol-{i}") is None for i in range(3))
    dave = ctl.get("dave-1")
    assert dave is not None and dave.due_at > datetime.now(UTC) + timedelta(minutes=50)


def test_reschedule_run_now_and_pause_resume_with_a_real_scheduler_and_worker(
        flower: str, browser: Browser, ctl: JobControl, fresh_pg_url: str,
        start_worker: Any, start_scheduler: Any) -> None:
    env = worker_env(fresh_pg_url)
    start_worker("medium", env=env)
    scheduler = start_scheduler(env)
    log = RunLog()
    later("moved", "erin")
    later("recurring", "erin", every=3600)
    browser.open(f"{flower}/scheduled?bucket=medium&state=scheduled")
    assert sorted(keys(browser)) == ["moved", "recurring"]
    # Reschedule one job two hours out.
    browser.type(f"{row(browser, 'moved')} input[name=when]", "2h")
    before = datetime.now(UTC)
    browser.click(f"{row(browser, 'moved')} button[value=reschedule]")
    assert notice(browser).startswith("job moved now due at ")
    moved = ctl.get("moved")
    assert moved is not None and moved.state == "scheduled" and moved.early_at == moved.due_at
    assert before + timedelta(hours=2) <= moved.due_at <= datetime.now(UTC) + timedelta(hours=2)
    # Run the recurring one now: it runs once and comes back an hour later.
    browser.click(f"{row(browser, 'recurring')} button[value=run-now]")
    assert notice(browser).startswith("job recurring is due now")
    wait_for(lambda: (r := ctl.get("recurring")) is not None and r.runs == 1
             and r.state == "scheduled", 60, "the job to run and reschedule itself")
    assert log.poll()["recurring"] == 1
    browser.open(f"{flower}/scheduled?bucket=medium&state=scheduled")
    cells = browser.js(f"[...document.querySelectorAll('{row(browser, 'recurring')} td')]"
                       ".map(c => c.textContent.trim())")
    assert cells[7] == "1" and cells[8].startswith("#1 (last change ")
    # Pause the bucket: a job due now waits in the store until it is resumed.
    browser.click("tr[data-bucket=medium] button[value=pause]")
    assert notice(browser).startswith("bucket medium paused")
    assert "medium" in ctl.paused()
    assert browser.js("document.querySelector('tr[data-bucket=medium] .bucket-state')"
                      ".textContent").startswith("paused since")
    wait_for(lambda: "medium: paused" in scheduler.log(), 20, "the scheduler to see the pause")
    process_message.apply_async((message("waiting", "erin"),), job_key="waiting")
    time.sleep(3)  # many scheduler passes (0.1 s each): the job must still wait
    waiting = ctl.get("waiting")
    assert waiting is not None and waiting.state == "scheduled" and not log.poll()["waiting"]
    browser.click("tr[data-bucket=medium] button[value=resume]")
    assert notice(browser) == "bucket medium resumed"
    assert "medium" not in ctl.paused()
    wait_for(lambda: log.poll()["waiting"] == 1, 60, "the waiting job to run after resume")


def form_token(client: httpx.Client, flower: str) -> str:
    page = client.get(f"{flower}/scheduled")
    found = re.search(r'name="_xsrf" value="([^"]+)"', page.text)
    assert page.status_code == 200 and found, page.text[-2000:]
    return found.group(1)


def test_the_page_refuses_without_auth_or_token_and_names_bad_input(
        flower: str, ctl: JobControl) -> None:
    later("kept", "frank")
    page = f"{flower}/scheduled"
    assert httpx.get(page, timeout=10).status_code == 401
    assert httpx.get(page, auth=(USER, "wrong"), timeout=10).status_code == 401
    with httpx.Client(auth=(USER, PASSWORD), timeout=20) as client:
        token = form_token(client, flower)
        cancel = {"_xsrf": token, "action": "cancel", "key": "kept"}
        # No login, no token, a token from nowhere, a cross-site form: all refused.
        assert httpx.post(page, data=cancel, cookies=client.cookies,
                          timeout=10).status_code in (401, 403)
        assert client.post(page, data={"action": "cancel", "key": "kept"}).status_code == 403
        assert client.post(page, data={**cancel, "_xsrf": "2|0|0|0"}).status_code == 403
        assert client.post(page, data=cancel, headers={"Sec-Fetch-Site": "cross-site"}
                           ).status_code == 403
        assert ctl.get("kept") is not None
        refused = {
            (("action", "cancel"), ("key", HOSTILE)): f"no job {HOSTILE!r}",
            (("action", "reschedule"), ("key", "kept"), ("when", "tomorrow")): "bad time",
            (("action", "reschedule"), ("key", "kept"), ("when", "2030-01-01T00:00")):
                "is naive",
            (("action", "pause"), ("target_bucket", "huge")): "unknown bucket 'huge'",
            (("action", "explode"),): "unknown action 'explode'",
            (("action", "reschedule"), ("key", "kept"), ("when", "9999-12-31T23:59:59-14:00")):
                "out of range",
            (("action", "reschedule"), ("key", "kept"), ("when", "9999-12-31T23:59:59+00:00")):
                "more than 10 years ahead",
            (("action", "reschedule-user"), ("target_user", "frank"),
             ("when", "9999-12-31T23:59:59+00:00")): "more than 10 years ahead",
            (("action", "x" * 100_000),): "unknown action 'xxx",
        }
        for fields, reason in refused.items():
            reply = client.post(page, data={"_xsrf": token, **dict(fields)})
            shown = re.search(r'<div id="notice"[^>]*>(.*?)</div>', reply.text, re.S)
            assert reply.status_code == 400 and shown, (fields, reply.text[-1500:])
            assert len(shown.group(1)) < 1000, fields  # one line, not the 100 kB echoed
            assert reason in shown.group(1).replace("&#x27;", "'").replace(
                "&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace(
                "&amp;", "&")
            assert "Traceback" not in reply.text and "<script>window" not in reply.text
        for query in ("state=lost", "limit=0", "after=bm90LWEtY3Vyc29y",
                      "bucket=medium&state=scheduled&after=WyJ4Il0"):
            reply = client.get(f"{page}?{query}")
            assert reply.status_code == 400 and 'id="notice"' in reply.text, query
        kept = ctl.get("kept")
        assert kept is not None and kept.due_at < datetime.now(UTC) + timedelta(hours=2)
