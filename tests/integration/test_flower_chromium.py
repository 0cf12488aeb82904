"""Flower shows the queues: real headless Chromium renders its Broker page, which lists
short, medium, long and their .dead queues with their message counts."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kombu import Connection

from tests.support import services
from tests.support.flower_process import running_flower
from tests.support.processes import wait_for

pytestmark = pytest.mark.services

USER, PASSWORD = "ops", "s3cret-ui"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync")
#: Messages put in each queue: every count differs, so a row cannot match by chance.
COUNTS = {"short": 3, "short.dead": 1, "medium": 4, "medium.dead": 2, "long": 5, "long.dead": 6}


def chromium() -> str:
    """Debian's chromium, installed by the set-up script when missing (never skipped)."""
    found = shutil.which("chromium")
    if found is None or not services.port_open(15672):
        subprocess.run([str(services.ROOT / "scripts" / "ensure-services.sh"), "management",
                        "chromium"], capture_output=True, timeout=600)
        found = shutil.which("chromium")
    if found is None or not services.port_open(15672):
        pytest.fail("chromium or RabbitMQ's management API (15672) missing after "
                    "scripts/ensure-services.sh", pytrace=False)
    return found


def render(url: str) -> str:
    """The DOM headless Chromium built for ``url`` (a fresh profile each time)."""
    with tempfile.TemporaryDirectory(prefix="recur-chromium-") as profile:
        result = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                 "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def broker_rows(dom: str) -> dict[str, int]:
    """Queue name -> the Messages column of the Broker page's table."""
    return {name: int(count) for name, count in re.findall(
        r'<tr id="([^"]+)">\s*<td>\1</td>\s*<td[^>]*>(\d+)</td>', dom)}


@pytest.fixture
def flower(live_services: None, tmp_path: Path) -> Iterator[str]:
    with running_flower(tmp_path / "logs", USER, PASSWORD) as base:
        yield base


def test_broker_page_lists_every_bucket_queue_and_dead_queue_with_counts(
        broker: Connection, flower: str) -> None:
    with broker.channel() as channel:
        for queue, count in COUNTS.items():
            for i in range(count):
                channel.basic_publish(channel.prepare_message(f"m{i}".encode()), exchange="",
                                      routing_key=queue)
    page = flower.replace("http://", f"http://{USER}:{PASSWORD}@") + "/broker"
    rows: dict[str, int] = {}

    def shows_counts() -> bool:  # the management API refreshes its figures every few seconds
        rows.clear()
        rows.update(broker_rows(render(page)))
        return all(rows.get(queue) == count for queue, count in COUNTS.items())

    wait_for(shows_counts, 90, f"the Broker page to show {COUNTS}", interval=2)
    assert set(COUNTS) <= set(rows)


def test_metrics_asks_for_the_same_credentials(flower: str) -> None:
    assert httpx.get(f"{flower}/metrics", timeout=10).status_code == 401
    assert httpx.get(f"{flower}/metrics", auth=(USER, "wrong"), timeout=10).status_code == 401
    reply = httpx.get(f"{flower}/metrics", auth=(USER, PASSWORD), timeout=10)
    assert reply.status_code == 200 and "flower_" in reply.text
