"""``recur doctor``'s judgements, without services: what is ok, warn or FAIL, and why."""

from __future__ import annotations

import pytest

from config.errors import ConfigError
from config.redact import masked as hide_passwords
from config.settings import Settings, load_settings
from routing.redis_check import REQUIRED, Finding, _line
from tasks.cli.doctor import passwords as doctor_secrets
from tasks.cli.doctor import rabbit as doctor_rabbit
from tasks.cli.doctor.check import FAIL, OK, WARN, Check, is_loopback
from tasks.cli.doctor.command import report
from tasks.cli.doctor.services import redis_setting, synchronous_commit


@pytest.mark.parametrize(("text", "shown"), [
    ("amqp://recur:s3cret@rabbitmq:5672//", "amqp://recur:***@rabbitmq:5672//"),
    ("redis://:s3cret@redis:6379/0", "redis://:***@redis:6379/0"),
    ("at rediss://default:p@ss@h:1/0 now", "at rediss://default:***@h:1/0 now"),
    ("postgresql+psycopg://u@h/db?password=s3cret&x=1",
     "postgresql+psycopg://u@h/db?password=***&x=1"),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
])
def test_no_password_is_ever_printed(text: str, shown: str) -> None:
    assert hide_passwords(text) == shown
    assert "s3cret" not in Check(OK, "x", text).line()


@pytest.mark.parametrize(("host", "local"), [
    ("127.0.0.1", True), ("127.8.0.1", True), ("::1", True), ("[::1]", True),
    ("localhost", True), (None, True), ("0.0.0.0", False), ("redis", False),
    ("10.0.0.5", False), ("db.example.com", False)])
def test_loopback_is_this_machine_only(host: str | None, local: bool) -> None:
    assert is_loopback(host) is local


@pytest.mark.parametrize(("url", "level"), [
    ("amqp://guest:guest@127.0.0.1:5672//", OK),
    ("amqp://guest:guest@localhost:5672//", OK),
    ("amqp://guest:guest@rabbitmq:5672//", FAIL),
    ("amqp://guest:guest@10.1.2.3:5672//", FAIL),
    ("amqp://recur:change-me-rabbit@rabbitmq:5672//", FAIL),
    ("amqp://recur:CHANGE-ME@127.0.0.1:5672//", FAIL),
    ("amqp://recur@rabbitmq:5672//", FAIL),
    ("amqp://recur:Xk3-long-real-secret@rabbitmq:5672//", OK),
])
def test_broker_password(url: str, level: str) -> None:
    assert doctor_secrets.broker_password(url).level == level


@pytest.mark.parametrize(("url", "level"), [
    ("redis://127.0.0.1:6379/0", OK),
    ("redis://redis:6379/0", FAIL),
    ("redis://:change-me-redis@redis:6379/0", FAIL),
    ("redis://:change-me-redis@127.0.0.1:6379/0", FAIL),
    ("redis://:a-real-one@redis:6379/0", OK),
    ("unix:///run/redis.sock", OK),
])
def test_redis_password(url: str, level: str) -> None:
    assert doctor_secrets.redis_password(url).level == level


@pytest.mark.parametrize(("url", "level"), [
    ("sqlite:///recur.sqlite3", OK),
    ("postgresql+psycopg://postgres@127.0.0.1:5432/test", OK),
    ("postgresql+psycopg://recur@db.example:5432/recur", WARN),
    ("postgresql+psycopg://recur:change-me-postgres@postgres:5432/recur", FAIL),
    ("postgresql+psycopg://recur:real%40one@postgres:5432/recur", OK),
])
def test_database_password(url: str, level: str) -> None:
    assert doctor_secrets.database_password(url).level == level


@pytest.mark.parametrize(("user", "password", "level"), [
    ("", "", OK),
    ("ops", "", FAIL),
    ("ops", "change-me-flower", FAIL),
    ("ops", "abc,def", FAIL),
    ("o,ps", "good-password", FAIL),
    ("o:ps", "good-password", FAIL),
    ("ops", "good:password", OK),
])
def test_flower_credentials(user: str, password: str, level: str) -> None:
    cfg = Settings(flower_user=user, flower_password=password)
    assert doctor_secrets.flower_credentials(cfg).level == level


@pytest.mark.parametrize(("port", "bind", "password", "level"), [
    (0, "0.0.0.0", "", OK),
    (9100, "127.0.0.1", "", OK),
    (9100, "0.0.0.0", "", WARN),
    (9100, "0.0.0.0", "a-real-one", OK),
    (9100, "0.0.0.0", "change-me-metrics", FAIL),
])
def test_metrics_exposure(port: int, bind: str, password: str, level: str) -> None:
    cfg = Settings(metrics_port=port, metrics_bind=bind, metrics_user="prom" if password else "",
                   metrics_password=password)
    assert doctor_secrets.metrics_credentials(cfg).level == level


def test_signing_is_optional_and_said() -> None:
    assert "not set" in doctor_secrets.signing(Settings()).text
    assert doctor_secrets.signing(Settings(signing_key="k" * 40)).text.startswith("set")


@pytest.mark.parametrize(("version", "queue_type", "level"), [
    ("3.10.8", "quorum", OK), ("4.1.0", "quorum", OK), ("3.8.0", "quorum", OK),
    ("3.7.28", "quorum", FAIL), ("3.7.28", "classic", WARN), ("?", "quorum", WARN)])
def test_rabbitmq_version(version: str, queue_type: str, level: str) -> None:
    check = doctor_rabbit.version_check(Settings(queue_type=queue_type), version)
    assert check.level == level


def test_a_queue_listed_by_the_management_api_is_compared_with_what_recur_declares() -> None:
    wanted = {"x-queue-type": "quorum", "x-delivery-limit": 4}
    good = {"type": "quorum", "arguments": {"x-delivery-limit": 4}}
    assert doctor_rabbit.differences("short", wanted, good) == []
    by_policy = {"type": "quorum", "arguments": {},
                 "effective_policy_definition": {"delivery-limit": 4}}
    assert doctor_rabbit.differences("short", wanted, by_policy) == []
    [classic] = doctor_rabbit.differences("short", {"x-queue-type": "quorum"},
                                          {"type": "classic", "arguments": {}})
    assert "short is classic" in classic
    [limit] = doctor_rabbit.differences("short", wanted, {"type": "quorum", "arguments": {}})
    assert "delivery limit none" in limit and "4" in limit


def _finding(name: str, value: str | None) -> Finding:
    setting = next(s for s in REQUIRED if s.name == name)
    return Finding(setting, value, _line(setting, value, "CONFIG GET is refused"))


@pytest.mark.parametrize(("name", "value", "strict", "level"), [
    ("maxmemory-policy", "noeviction", False, OK),
    ("maxmemory-policy", "allkeys-lru", False, FAIL),
    ("maxmemory-policy", "volatile-ttl", True, FAIL),
    ("maxmemory-policy", None, True, WARN),
    ("appendonly", "yes", False, OK),
    ("appendonly", "no", False, WARN),
    ("appendonly", "no", True, FAIL),
    ("appendonly", None, False, WARN),
])
def test_redis_settings_judged(name: str, value: str | None, strict: bool, level: str) -> None:
    check = redis_setting(Settings(strict=strict), _finding(name, value))
    assert check.level == level
    assert name in check.line()
    if level != OK:
        assert ("CONFIG SET" in check.text) if value else ("cannot be read" in check.text)


def test_synchronous_commit_off_fails() -> None:
    assert synchronous_commit("off").level == FAIL
    assert all(synchronous_commit(v).level == OK
               for v in ("on", "local", "remote_write", "remote_apply"))


def test_exit_code_is_2_on_a_failure_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert report([Check(OK, "a", "fine"), Check(WARN, "b", "meh")]) == 0
    assert report([Check(OK, "a", "fine"), Check(FAIL, "redis x", "bad")]) == 2
    out, err = capsys.readouterr()
    assert "doctor: 1 ok, 0 warn, 1 FAIL" in out
    assert err.strip() == "recur: doctor: 1 check(s) failed: redis x"


@pytest.mark.parametrize(("raw", "value"), [
    ("1", True), ("true", True), ("YES", True), (" yes ", True),
    ("0", False), ("false", False), ("No", False)])
def test_strict_is_a_switch(raw: str, value: bool) -> None:
    assert load_settings({"RECUR_STRICT": raw}).strict is value


@pytest.mark.parametrize("raw", ["", "2", "on", "y", "enabled", "nan"])
def test_strict_refuses_anything_else(raw: str) -> None:
    with pytest.raises(ConfigError, match="RECUR_STRICT"):
        load_settings({"RECUR_STRICT": raw})


DLX = {"x-dead-letter-exchange": "recur.dead", "x-delivery-limit": 4}


@pytest.mark.parametrize(("found", "said"), [
    ({"arguments": {**DLX, "x-dead-letter-exchange": "elsewhere"}},
     "short has x-dead-letter-exchange 'elsewhere', recur declares 'recur.dead'"),
    ({"arguments": {"x-delivery-limit": 4}},
     "short has x-dead-letter-exchange 'none', recur declares 'recur.dead'"),
    ({"arguments": {**DLX, "x-max-length": 10}},
     "short has x-max-length 10, recur declares 'none'"),
    ({"durable": False}, "short is not durable, recur declares it durable"),
    ({"auto_delete": True}, "short is auto-delete, recur declares it not auto-delete"),
    ({"exclusive": True}, "short is exclusive, recur declares it not exclusive"),
])
def test_every_argument_and_flag_the_broker_compares_is_compared(found: dict[str, object],
                                                                  said: str) -> None:
    """A queue the broker would refuse recur's declare of (406) is never "ok": before, the
    management API's listing was compared by type and delivery limit only."""
    listed = {"type": "quorum", "durable": True, "auto_delete": False, "exclusive": False,
              "arguments": DLX, **found}
    wanted = {"x-queue-type": "quorum", **DLX}
    assert doctor_rabbit.differences("short", wanted, listed) == [said]
