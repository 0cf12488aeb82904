"""The seed job's command line and COPY text lines (no Spark, no services)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

import pytest

from scheduler.store.bulk import BulkResult, copy_line, parse_copy_line
from scheduler.store.connection import libpq_url
from spark.options import parse_duration, parse_options, parse_start


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("15m", 900),
                                               ("2h", 7200), ("1d", 86400), ("0.5h", 1800)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "-1h", "1w", "one hour"])
def test_bad_durations_say_what_is_expected(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="not a duration like 90s"):
        parse_duration(text)


def test_start_without_offset_is_utc() -> None:
    assert parse_start("2026-01-01T10:00") == datetime(2026, 1, 1, 10, tzinfo=UTC)
    assert parse_start("2026-01-01T10:00+02:00") == datetime(2026, 1, 1, 8, tzinfo=UTC)


def test_options_need_exactly_one_source(capsys: pytest.CaptureFixture[str]) -> None:
    opts = parse_options(["--generate", "10", "--spread", "30m", "--max-connections", "2"])
    assert (opts.generate, opts.input, opts.spread, opts.max_connections) == (10, None, 1800, 2)
    for argv in ([], ["--generate", "10", "--input", "x.csv"], ["--generate", "0"]):
        with pytest.raises(SystemExit):
            parse_options(argv)
    assert "--generate" in capsys.readouterr().err


def test_copy_lines_round_trip_every_escape() -> None:
    row = ("k\t1", "tasks.process_message", "short", '{"a":"x\\ny\\\\z"}\r\n',
           "2026-01-01T00:00:00.000Z")
    line = copy_line(row)
    assert line.endswith("\n") and line.count("\n") == 1 and line.count("\t") == 4
    assert parse_copy_line(line) == row


def test_bulk_result_counts_present_rows() -> None:
    total = BulkResult(10, 7) + BulkResult(5, 0)
    assert (total.offered, total.loaded, total.present) == (15, 7, 8)


def test_libpq_url_keeps_the_schema_option() -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1:5432/test?options=-csearch_path%3Dabc"
    assert libpq_url(url) == "postgresql://postgres@127.0.0.1:5432/test?options=-csearch_path%3Dabc"


@pytest.mark.parametrize("argv", [[], ["--generate", "abc"], ["--generate", "5", "--runs", "3"],
                                  ["--generate", "5", "--every", "1h", "--jitter", "2"]])
def test_a_bad_command_line_is_one_line_and_exit_code_2(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_options(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert len(err.splitlines()) == 1 and err.startswith("recur: seed: "), err
