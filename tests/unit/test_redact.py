"""One masker for every printed URL: a password never reaches a log line or a terminal,
whatever form the URL takes; placeholders are recognised however they are spelt."""

from __future__ import annotations

import pytest

from config import errors
from config.errors import ConfigError, StoreUnavailable
from config.redact import is_placeholder, masked, passwords
from config.settings import load_settings


@pytest.mark.parametrize(("text", "expected"), [
    ("amqp://guest:s3cret@host:5672//", "amqp://guest:***@host:5672//"),
    ("redis://:s3cret@redis:6379/0", "redis://:***@redis:6379/0"),
    ("rediss://default:s3cret@redis:6380/0", "rediss://default:***@redis:6380/0"),
    ("redis://redis:6379/0?password=s3cret", "redis://redis:6379/0?password=***"),
    ("redis://redis:6379/0?db=1&password=s3cret&x=1", "redis://redis:6379/0?db=1&password=***&x=1"),
    ("redis://redis/0?PASSWORD=s3cret#frag", "redis://redis/0?PASSWORD=***#frag"),
    ("postgresql+psycopg://app@db/recur?sslpassword=s3cret",
     "postgresql+psycopg://app@db/recur?sslpassword=***"),
    ("http://h/api?token=s3cret&api_key=s3cret", "http://h/api?token=***&api_key=***"),
    ("amqp://u:s3cret@h1//,amqp://u:s3cret@h2//", "amqp://u:***@h1//,amqp://u:***@h2//"),
    ("amqp://u:s3cret@h1//;amqp://u:s3cret@h2//", "amqp://u:***@h1//;amqp://u:***@h2//"),
    ("redis://h1?password=s3cret,redis://:s3cret@h2",
     "redis://h1?password=***,redis://:***@h2"),
    ("amqp://u:s3c@r:et@host//", "amqp://u:***@host//"),  # '@' and ':' in the password
    ("amqp://u:s3c/ret@host//", "amqp://u:***@host//"),  # '/' in the password
    ("redis://:s3c?ret@host/0", "redis://:***@host/0"),  # '?' in the password
    ("host=db password=s3cret dbname=recur", "host=db password=*** dbname=recur"),
    ("broker amqp://guest:s3cret@host:5672// down", "broker amqp://guest:***@host:5672// down"),
    ("RECUR_REDIS_URL='redis://:s3cret@h/0': bad", "RECUR_REDIS_URL='redis://:***@h/0': bad"),
    ("two: redis://:s3cret@a/0 and amqp://x:s3cret@b//",
     "two: redis://:***@a/0 and amqp://x:***@b//"),
])
def test_every_form_of_url_password_is_masked(text: str, expected: str) -> None:
    assert masked(text) == expected
    assert "s3c" not in masked(text)


@pytest.mark.parametrize("text", [
    "redis://127.0.0.1:6379/0", "redis://[::1]:6379/0", "sqlite:///recur.sqlite3",
    "postgresql+psycopg://postgres@127.0.0.1:5432/test", "http://h/in?email=a@b.example",
    "no url here: a:b@c", "", "amqp://u:@h//",
])
def test_text_without_a_password_is_left_alone(text: str) -> None:
    assert masked(text) == text
    assert passwords(text) == []


def test_a_setting_value_is_one_url_even_with_a_space_in_its_password() -> None:
    assert masked("amqp://u:s3c ret@h//", stop_at_space=False) == "amqp://u:***@h//"


def test_passwords_are_found_decoded_for_the_placeholder_check() -> None:
    assert passwords("redis://:change%2Dme@h/0?password=x%20y") == ["change-me", "x y"]


@pytest.mark.parametrize(("secret", "placeholder"), [
    ("change-me", True), ("change-me-flower", True), ("CHANGE-ME-2", True),
    ("change_me", True), ("changeme", True), ("change%2Dme", True), (" change-me", True),
    ("s3cret", False), ("please-change-me", False), ("", False), ("exchange-me", False),
])
def test_placeholders_are_recognised(secret: str, placeholder: bool) -> None:
    assert is_placeholder(secret) is placeholder


def test_both_call_sites_use_the_one_masker() -> None:
    assert errors.masked is masked
    line = errors.one_line(StoreUnavailable("store redis://:s3cret@h/0?password=s3cret: down"))
    assert line == "store redis://:***@h/0?password=***: down"
    with pytest.raises(ConfigError) as info:
        load_settings({"RECUR_DATABASE_URL": "postgres://:s3cret@db/recur?password=x"})
    assert "s3cret" not in str(info.value) and "password=x" not in str(info.value)
    assert "postgresql+psycopg://:***@db/recur?password=***" in str(info.value)
