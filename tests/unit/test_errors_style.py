"""One error style: every bad setting at once, URLs masked, driver errors named by service."""

from __future__ import annotations

import pytest
from kombu.exceptions import OperationalError
from sqlalchemy.exc import NoSuchModuleError

from config.errors import ConfigError, StoreUnavailable, one_line
from config.redact import masked
from config.settings import load_settings, problems
from tasks.broker_ops import exception_line


def test_every_bad_variable_is_reported_at_once() -> None:
    _, bad = problems({"RECUR_MAX_PAYLOAD_BYTES": "1k", "RECUR_LOCK_TTL": "soon",
                       "RECUR_NOPE": "1", "RECUR_MAX_DELIVERIES": "3"})
    assert [line.split("=")[0].split(":")[0] for line in bad] == [
        "RECUR_LOCK_TTL", "RECUR_MAX_PAYLOAD_BYTES", "RECUR_NOPE"]
    with pytest.raises(ConfigError, match="3 bad settings: RECUR_LOCK_TTL"):
        load_settings({"RECUR_MAX_PAYLOAD_BYTES": "1k", "RECUR_LOCK_TTL": "soon",
                       "RECUR_NOPE": "1"})


@pytest.mark.parametrize("url", ["postgres://app:pw@db/recur", "postgresql://app:pw@db/recur",
                                 "postgresql+psycopg2://app:pw@db/recur"])
def test_a_postgres_url_without_psycopg_gets_the_url_to_use(url: str) -> None:
    [line] = problems({"RECUR_DATABASE_URL": url})[1]
    assert "use postgresql+psycopg://app:***@db/recur" in line
    assert "pw" not in line


def test_urls_in_error_lines_lose_their_password() -> None:
    assert masked("broker amqp://guest:s3cret@host:5672// down") == (
        "broker amqp://guest:***@host:5672// down")
    assert one_line(StoreUnavailable("store postgresql+psycopg://u:pw@h/db: no")) == (
        "store postgresql+psycopg://u:***@h/db: no")


def test_driver_errors_are_named_by_their_service_and_bugs_are_not_ours() -> None:
    assert one_line(OperationalError("[Errno 111] Connection refused")) == (
        "broker: OperationalError: [Errno 111] Connection refused")
    assert (one_line(NoSuchModuleError("Can't load plugin: sqlalchemy.dialects:postgres"))
            or "").startswith("due-jobs database: NoSuchModuleError")
    assert one_line(KeyError("bug")) is None


def test_a_stored_failure_reads_as_class_and_message() -> None:
    stored = {"exc_type": "InvalidMessage", "exc_module": "config.errors",
              "exc_message": ["invalid message: user_id: missing"]}
    assert exception_line(stored) == "InvalidMessage: invalid message: user_id: missing"
