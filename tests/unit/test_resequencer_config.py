"""Resequencer settings, destination checks and the outbound request: no services."""

from __future__ import annotations

import pytest

from config.errors import ConfigError, UnknownDestination
from config.settings import load_settings
from routing.reseq.intake import check_destination, submit
from routing.reseq.lease import lease_ms, step_limit_seconds
from routing.reseq.outbound import Delivery


def test_destinations_are_read_as_name_url_pairs() -> None:
    cfg = load_settings({"RECUR_DESTINATIONS": "billing:http://h:8080/in, crm:https://c/x"})
    assert dict(cfg.destinations) == {"billing": "http://h:8080/in", "crm": "https://c/x"}
    assert dict(load_settings({}).destinations) == {}


@pytest.mark.parametrize(("var", "value", "words"), [
    ("RECUR_DESTINATIONS", "billing", "'billing' is not 'name:http(s)://...'"),
    ("RECUR_DESTINATIONS", "billing:ftp://h/x", "is not 'name:http(s)://...'"),
    ("RECUR_RESEQ_GAP_TIMEOUT", "0", "reseq_gap_timeout must be positive"),
    ("RECUR_RESEQ_CAPACITY", "-1", "reseq_capacity must be positive"),
    ("RECUR_SEND_RETRIES", "-1", "send_retries must not be negative"),
    ("RECUR_SEND_TIMEOUT", "soon", "could not convert"),
    ("RECUR_RESEQ_PROCESSOR", "m:f", "removed: register the processing step as a task"),
    ("RECUR_RESEQ_STEPS", "billing", "'billing' is not 'destination:task.name'"),
    ("RECUR_RESEQ_STEPS", "billing:my.step", "destination(s) not in RECUR_DESTINATIONS: billing"),
])
def test_bad_resequencer_settings_are_errors_naming_the_variable(var: str, value: str,
                                                                 words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({var: value})
    assert var in str(caught.value) and words in str(caught.value)


def test_unknown_destination_is_refused_naming_the_known_ones() -> None:
    cfg = load_settings({"RECUR_DESTINATIONS": "b:http://h/b,a:http://h/a"})
    assert check_destination("a", cfg) == "a"
    with pytest.raises(UnknownDestination, match=r"unknown destination 'z' \(known: a, b\)"):
        check_destination("z", cfg)
    with pytest.raises(UnknownDestination, match="none: set RECUR_DESTINATIONS"):
        submit("a", {"id": "m", "user_id": "u", "bucket": "short", "payload": 1},
               load_settings({}))


def test_a_killed_senders_lease_runs_out_within_seconds_a_hung_one_after_its_retries(
        ) -> None:
    cfg = load_settings({})
    assert lease_ms(cfg) <= 3000, "a killed sender's destinations would wait longer"
    assert step_limit_seconds(cfg) > (cfg.send_retries + 1) * cfg.send_timeout


def test_the_fence_goes_out_as_a_header_not_in_the_body() -> None:
    delivery = Delivery("billing", 7, "m7", 1.5, {"x": 1}, fence=42)
    assert delivery.headers()["X-Recur-Fence"] == "42"
    assert delivery.body() == Delivery("billing", 7, "m7", 1.5, {"x": 1}, fence=43).body()


def test_the_request_names_destination_and_sequence_number() -> None:
    delivery = Delivery("billing", 7, "m7", 1.5, {"x": 1})
    assert delivery.body() == {"destination": "billing", "seq": 7, "id": "m7",
                               "arrived_at": 1.5, "result": {"x": 1}}
    assert delivery.headers() == {"X-Recur-Destination": "billing", "X-Recur-Seq": "7",
                                  "Idempotency-Key": "billing:7"}


def test_recur_worker_outbound_runs_the_senders_on_threads() -> None:
    from tasks.cli.params import bucket_arg
    from tasks.cli.worker import worker_argv

    argv = worker_argv(bucket_arg(None, None, "outbound"))
    assert argv[argv.index("-Q") + 1] == "outbound" and argv[argv.index("-P") + 1] == "threads"


@pytest.mark.parametrize("name", ["bi{l}l", "a b", "x*", "é", "-lead", "n" * 65])
def test_a_destination_name_that_cannot_name_its_keys_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="destination name"):
        load_settings({"RECUR_DESTINATIONS": f"{name}:http://h/x"})
