from __future__ import annotations

import pytest

from config.errors import ConfigError
from config.settings import describe, load_settings


def test_defaults_point_at_local_services() -> None:
    cfg = load_settings({})
    assert cfg.broker_url.startswith("amqp://") and "127.0.0.1:5672" in cfg.broker_url
    assert cfg.redis_url == "redis://127.0.0.1:6379/0"
    assert cfg.database_url.startswith("sqlite:///")
    assert cfg.results_url == cfg.redis_url
    assert cfg.max_payload_bytes == 1024


def test_environment_overrides_and_parses_types() -> None:
    cfg = load_settings({"RECUR_MAX_DELIVERIES": "7", "RECUR_WORK_SCALE": "0.5",
                         "RECUR_KINDS": "invoice:long, poke:short", "PATH": "/bin"})
    assert cfg.max_deliveries == 7
    assert cfg.work_scale == 0.5
    assert cfg.kinds["invoice"] == "long" and cfg.kinds["poke"] == "short"
    assert cfg.kinds["report"] == "long"  # defaults stay


@pytest.mark.parametrize(("env", "named"), [
    ({"RECUR_BROKR_URL": "amqp://x"}, "RECUR_BROKR_URL"),
    ({"RECUR_MAX_DELIVERIES": "five"}, "RECUR_MAX_DELIVERIES"),
    ({"RECUR_MAX_DELIVERIES": "0"}, "RECUR_MAX_DELIVERIES"),
    ({"RECUR_WORK_SCALE": "-1"}, "RECUR_WORK_SCALE"),
    ({"RECUR_QUEUE_TYPE": "stream"}, "RECUR_QUEUE_TYPE"),
    ({"RECUR_KINDS": "invoice:huge"}, "RECUR_KINDS"),
    ({"RECUR_KINDS": "invoice"}, "RECUR_KINDS"),
])
def test_bad_setting_is_an_error_naming_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        load_settings(env)


def test_every_setting_is_documented() -> None:
    rows = describe()
    assert {var for var, _, _ in rows} >= {
        "RECUR_BROKER_URL", "RECUR_REDIS_URL", "RECUR_DATABASE_URL"}
    assert all(doc.strip() for _, _, doc in rows)


def test_configuration_doc_lists_every_setting() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    missing = [var for var, _, _ in describe() if f"`{var}`" not in doc]
    assert not missing, f"docs/configuration.md lacks {missing} (see `recur settings`)"
