from __future__ import annotations

from dataclasses import fields

import pytest

from config.errors import ConfigError
from config.settings import Settings, load_settings, problems, shown
from config.settings_bounds import bounds_text, number_bounds
from config.settings_report import describe


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


# --- every number finite and within its documented bounds --------------------------------

def numeric_settings() -> list[str]:
    return [f.name for f in fields(Settings) if f.type in (int, float, "int", "float")]


def beyond(name: str) -> list[str]:
    """Values just outside ``name``'s range, and the non-finite ones."""
    low, high, excluded = number_bounds(name)
    below = str(low) if excluded else str(low - 1)
    return ["nan", "inf", "-inf", below, str(int(high) + 1), "1e300"]


@pytest.mark.parametrize("name", numeric_settings())
def test_each_number_out_of_its_bounds_is_refused_naming_the_variable(name: str) -> None:
    var = f"RECUR_{name.upper()}"
    for raw in beyond(name):
        values, bad = problems({var: raw})
        assert name not in values, (var, raw)
        assert len(bad) == 1 and bad[0].startswith(f"{var}={raw!r}: "), (raw, bad)
        assert bounds_text(name) in bad[0]


@pytest.mark.parametrize("name", numeric_settings())
def test_each_number_at_its_bounds_is_accepted(name: str) -> None:
    low, high, excluded = number_bounds(name)
    top = Settings.__dataclass_fields__[name].type in (int, "int")
    edge = {str(int(high) if top else high)}
    if not excluded:
        edge.add(str(int(low) if top else low))
    for raw in edge:
        values, bad = problems({f"RECUR_{name.upper()}": raw})
        # a lone edge may contradict a default (a low watermark of 10 million is not below
        # the default high one): only a line naming this variable alone would be wrong
        assert name in values, (raw, bad)


def test_every_default_is_within_its_bounds() -> None:
    cfg = load_settings({})
    for name in numeric_settings():
        low, high, excluded = number_bounds(name)
        value = getattr(cfg, name)
        assert (low < value if excluded else low <= value) and value <= high, name


def test_each_numeric_settings_bounds_are_printed_and_documented() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    rows = {line.split("`")[1]: line for line in doc.splitlines() if line.startswith("| `RECUR_")}
    described = {var: text for var, _, text in describe()}
    for name in numeric_settings():
        var, wanted = f"RECUR_{name.upper()}", f"Bounds: {bounds_text(name)}."
        assert described[var].endswith(wanted)
        assert wanted in rows.get(var, ""), f"docs/configuration.md: {var} lacks '{wanted}'"


def test_a_lease_under_a_time_limit_is_a_warning_not_a_refusal() -> None:
    """Tests and demos shorten the lease on purpose; doctor and the scheduler say it."""
    from config.checks import lease_warnings

    cfg = load_settings({"RECUR_LEASE_SECONDS": "60"})
    (line,) = lease_warnings(cfg.lease_seconds, cfg.buckets)
    assert "RECUR_LEASE_SECONDS=60" in line and "'long'" in line and "1200 s" in line
    assert lease_warnings(load_settings({}).lease_seconds, cfg.buckets) == []


def test_a_first_send_backoff_above_its_maximum_waits_the_maximum() -> None:
    cfg = load_settings({"RECUR_SEND_BACKOFF": "10"})
    assert (cfg.send_backoff, cfg.send_backoff_max) == (10, 5)


@pytest.mark.parametrize(("env", "names"), [
    ({"RECUR_LOW_WATERMARK": "3001"}, ("RECUR_LOW_WATERMARK=3001", "RECUR_HIGH_WATERMARK=3000")),
    ({"RECUR_LOW_WATERMARK": "50", "RECUR_HIGH_WATERMARK": "40"},
     ("RECUR_LOW_WATERMARK=50", "RECUR_HIGH_WATERMARK=40")),
    ({"RECUR_METRICS_USER": "prom"}, ("RECUR_METRICS_USER", "RECUR_METRICS_PASSWORD")),
    ({"RECUR_METRICS_PASSWORD": "pw"}, ("RECUR_METRICS_USER", "RECUR_METRICS_PASSWORD")),
])
def test_contradicting_settings_are_one_line_naming_both(env: dict[str, str],
                                                         names: tuple[str, ...]) -> None:
    [line] = problems(env)[1]
    assert all(name in line for name in names), line
    with pytest.raises(ConfigError):
        load_settings(env)


def test_a_contradiction_with_a_bad_value_is_not_reported_twice() -> None:
    bad = problems({"RECUR_LOW_WATERMARK": "nan", "RECUR_HIGH_WATERMARK": "500"})[1]
    assert len(bad) == 1 and bad[0].startswith("RECUR_LOW_WATERMARK='nan'"), bad


def test_consistent_settings_are_accepted() -> None:
    cfg = load_settings({"RECUR_LOW_WATERMARK": "20", "RECUR_HIGH_WATERMARK": "40",
                         "RECUR_LEASE_SECONDS": "1201", "RECUR_SEND_BACKOFF": "5",
                         "RECUR_METRICS_USER": "prom", "RECUR_METRICS_PASSWORD": "pw"})
    assert (cfg.low_watermark, cfg.high_watermark, cfg.lease_seconds) == (20, 40, 1201.0)


# --- the key prefix ----------------------------------------------------------------------

@pytest.mark.parametrize("prefix", ["", " ", "a b", "a*", "a?b", "a[b]", "{a}", "a{b", "a}b",
                                    "recur\n", "ré", "a/b", "a\\b", "x" * 65, "a\tb", "a\x00b"])
def test_a_bad_key_prefix_is_refused(prefix: str) -> None:
    [line] = problems({"RECUR_KEY_PREFIX": prefix})[1]
    assert line.startswith("RECUR_KEY_PREFIX=") and "key_prefix" in line


@pytest.mark.parametrize("prefix", ["recur", "recur-test-0123456789gw1", "a.b:c_d-1", "x" * 64])
def test_a_usable_key_prefix_is_accepted(prefix: str) -> None:
    assert load_settings({"RECUR_KEY_PREFIX": prefix}).key_prefix == prefix


# --- placeholder passwords ---------------------------------------------------------------

@pytest.mark.parametrize(("var", "value"), [
    ("RECUR_BROKER_URL", "amqp://recur:change-me-rabbit@rabbitmq:5672//"),
    ("RECUR_BROKER_URL", "amqp://u:CHANGE-ME@h1//;amqp://u:real@h2//"),
    ("RECUR_REDIS_URL", "redis://:change-me@redis:6379/0"),
    ("RECUR_REDIS_URL", "redis://redis:6379/0?password=change-me-redis"),
    ("RECUR_REDIS_URL", "redis://redis:6379/0?db=0&password=change%2Dme"),
    ("RECUR_DATABASE_URL", "postgresql+psycopg://recur:change-me-postgres@db/recur"),
    ("RECUR_RESULT_BACKEND", "redis://:Change_Me@redis:6379/1"),
    ("RECUR_FLOWER_PASSWORD", "change-me-flower"),
    ("RECUR_FLOWER_PASSWORD", "changeme"),
    ("RECUR_FLOWER_BROKER_API", "http://recur:change-me-rabbit@rabbitmq:15672/api/"),
    ("RECUR_METRICS_PASSWORD", "change-me"),
    ("RECUR_DESTINATIONS", "billing:https://u:change-me@billing.example/in"),
])
def test_a_placeholder_password_is_refused_naming_the_variable(var: str, value: str) -> None:
    env = {var: value}
    if var == "RECUR_METRICS_PASSWORD":
        env["RECUR_METRICS_USER"] = "prom"
    [line] = problems(env)[1]
    assert line.startswith(f"{var}=") and "placeholder" in line
    assert "change" not in line.split(":", 1)[0].lower()  # the value shown is masked


@pytest.mark.parametrize(("var", "value"), [
    ("RECUR_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//"),
    ("RECUR_REDIS_URL", "redis://127.0.0.1:6379/0"),
    ("RECUR_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
    ("RECUR_FLOWER_PASSWORD", "please-change-me-never"),
    ("RECUR_REDIS_URL", "redis://:s3cret@redis:6379/0"),
])
def test_real_and_dev_credentials_pass(var: str, value: str) -> None:
    assert problems({var: value})[1] == []


# --- secrets shown masked ----------------------------------------------------------------

def test_secret_values_are_masked_in_bad_lines_and_in_the_table() -> None:
    line = problems({"RECUR_METRICS_PASSWORD": "change-me-x", "RECUR_METRICS_USER": "p"})[1][0]
    assert "change-me-x" not in line and "'***'" in line
    assert shown("flower_password", "hunter2") == "***"
    assert shown("broker_url", "amqp://u:hunter2@h//") == "amqp://u:***@h//"
    assert all("guest:guest" not in default for _, default, _ in describe())


@pytest.mark.parametrize("bind", ["", " ", "0.0.0.0 ", "host name", "-host",
                                  "a" * 254, "http://127.0.0.1", "256.1.1.1:80"])
def test_a_bad_metrics_bind_address_is_refused(bind: str) -> None:
    [line] = problems({"RECUR_METRICS_BIND": bind})[1]
    assert line.startswith("RECUR_METRICS_BIND=")


@pytest.mark.parametrize("bind", ["127.0.0.1", "0.0.0.0", "::1", "::", "localhost",
                                  "metrics.internal"])
def test_a_metrics_bind_address_is_accepted(bind: str) -> None:
    assert load_settings({"RECUR_METRICS_BIND": bind}).metrics_bind == bind


def test_a_hostile_value_never_echoes_a_password_or_floods_the_line() -> None:
    bad = problems({"RECUR_LOCK_TTL": "redis://:hunter2@h/0", "RECUR_MAX_DELIVERIES": "9" * 5000,
                    "RECUR_KINDS": "x" * 10_000, "RECUR_KEY_PREFIX": "k" * 10_000})[1]
    assert len(bad) == 4 and all(len(line) < 300 for line in bad), bad
    assert not any("hunter2" in line for line in bad)


@pytest.mark.parametrize(("var", "value"), [
    ("RECUR_BROKER_URL", ""), ("RECUR_BROKER_URL", "http://h//"), ("RECUR_BROKER_URL", "://"),
    ("RECUR_BROKER_URL", "amqp://u:s3cret@h:99999//"),
    ("RECUR_BROKER_URL", "amqp://h:5672//;redis://h:6379/0"),  # each node of a cluster list
    ("RECUR_REDIS_URL", ""), ("RECUR_REDIS_URL", "0"), ("RECUR_REDIS_URL", "http://h:6379/0"),
    ("RECUR_REDIS_URL", "redis://h:abc/0"), ("RECUR_REDIS_URL", "redis://h:6379/abc"),
    ("RECUR_RESULT_BACKEND", "abc"), ("RECUR_RESULT_BACKEND", "nosuch://h/0"),
    ("RECUR_FLOWER_BROKER_API", "h:15672/api/"),
    ("RECUR_DATABASE_URL", "postgresql+psycopg://u:s3cret@h:abc/db"),
    ("RECUR_LOG_LEVEL", "loud"), ("RECUR_LOG_LEVEL", ""),
])
def test_a_url_or_level_no_driver_takes_is_refused_naming_the_variable(var: str,
                                                                         value: str) -> None:
    _, bad = problems({var: value})
    assert len(bad) == 1 and bad[0].startswith(f"{var}=") and "s3cret" not in bad[0], bad


@pytest.mark.parametrize(("var", "value"), [
    ("RECUR_BROKER_URL", "amqps://u:p@h:5671/vh"), ("RECUR_BROKER_URL", "pyamqp://h//"),
    ("RECUR_BROKER_URL", "amqp://u:p@rabbit-1:5672//;amqp://u:p@rabbit-2:5672//"),
    ("RECUR_REDIS_URL", "rediss://:p@h:6380/2"), ("RECUR_REDIS_URL", "unix:///run/redis.sock"),
    ("RECUR_REDIS_URL", "redis://h"), ("RECUR_RESULT_BACKEND", "db+postgresql://u@h/db"),
    ("RECUR_RESULT_BACKEND", "rpc://"), ("RECUR_FLOWER_BROKER_API", "http://u:p@h:15672/api/"),
])
def test_urls_of_the_drivers_schemes_are_accepted(var: str, value: str) -> None:
    assert problems({var: value})[1] == []


def test_a_log_level_in_any_case_is_read_as_its_name() -> None:
    assert load_settings({"RECUR_LOG_LEVEL": " debug "}).log_level == "DEBUG"


def test_a_value_that_is_not_utf8_is_refused_naming_the_variable() -> None:
    # os.environ hands bytes that are not UTF-8 over as lone surrogates
    _, bad = problems({"RECUR_REDIS_URL": "redis://h\udcff/0", "RECUR_KEY_PREFIX": "p\udcfe"})
    assert sorted(bad) == ["RECUR_KEY_PREFIX: not valid UTF-8 text",
                           "RECUR_REDIS_URL: not valid UTF-8 text"]
