"""The Scheduled page's pieces that need no service: Flower's navbar with its item, the
new-time field, durations as shown, the filters carried from page to page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import flower
import pytest

from config.errors import InvalidArgument
from tasks.cli.flower_pages import NAV_ITEM, with_nav_item
from tasks.cli.scheduled_actions import Form
from tasks.cli.scheduled_view import View, span

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def test_flowers_own_navbar_gets_the_scheduled_item_after_broker() -> None:
    navbar = (Path(flower.__file__).parent / "templates" / "navbar.html").read_text()
    patched = with_nav_item(navbar)
    assert patched.count("recur-scheduled") == 1
    assert patched.index(">Broker</a>") < patched.index(">Scheduled</a>")
    assert with_nav_item("<ul>no broker here</ul>") == "<ul>no broker here</ul>"
    assert NAV_ITEM.strip().startswith("<li")


@pytest.mark.parametrize(("text", "due"), [
    ("10m", NOW + timedelta(minutes=10)), (" 1h30m ", NOW + timedelta(minutes=90)),
    ("2030-02-01T00:00:00Z", datetime(2030, 2, 1, tzinfo=UTC)),
    ("2030-02-01T01:00:00+01:00", datetime(2030, 2, 1, tzinfo=UTC))])
def test_a_new_time_is_a_delay_or_an_iso_time(text: str, due: datetime) -> None:
    assert Form(when=text).due(NOW) == due


@pytest.mark.parametrize(("text", "reason"), [
    ("", "give a new time"), ("tomorrow", "bad time 'tomorrow'"),
    ("0s", "must be more than 0"), ("2030-02-01T00:00:00", "is naive"),
    ("2030-13-01T00:00:00Z", "bad time")])
def test_a_bad_new_time_is_named(text: str, reason: str) -> None:
    with pytest.raises(InvalidArgument, match=reason):
        Form(when=text).due(NOW)


def test_durations_are_short_and_exact_to_the_unit_shown() -> None:
    assert [span(s) for s in (0, 45, 725, 11220, 187200, -90)] == [
        "0s", "45s", "12m 05s", "3h 07m", "2d 04h", "1m 30s"]


def test_the_filters_travel_but_the_cursor_only_when_asked() -> None:
    view = View(bucket="short", user="a&b", limit="50", after="abc")
    assert view.query() == "?bucket=short&user=a%26b"
    assert view.query(after="xyz") == "?bucket=short&user=a%26b&after=xyz"
    assert ("after", "abc") in view.pairs() and ("limit", "50") not in view.pairs()
    with pytest.raises(InvalidArgument, match="bad page size"):
        View(limit="lots").page_size()
