"""docker-compose.yml runs the whole stack with health checks, no baked-in secrets and no
open doors: every published port on loopback, every password required from .env, Redis
with a password, noeviction and AOF, and .env.example's placeholders refused by recur."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from config.buckets_in_use import BUCKETS
from config.errors import ConfigError
from config.redact import is_placeholder
from config.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
#: ``${VAR}``, ``${VAR:?message}``, ``${VAR:-default}`` (compose's interpolation).
VARIABLE = re.compile(r"\$\{(\w+)(?:(:?[?-])([^}]*))?\}")
SECRET_WORDS = ("PASS", "SECRET", "TOKEN", "KEY", "AUTH")


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def env_example() -> dict[str, str]:
    lines = (ROOT / ".env.example").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def interpolate(text: str, env: dict[str, str]) -> str:
    """What compose makes of ``text`` with ``env`` as .env (KeyError: a required one unset)."""
    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2) or "", m.group(3) or ""
        value = env.get(name, "")
        if op.endswith("?") and not value:
            raise KeyError(f"{name}: {arg}")
        return value if value or not op.endswith("-") else arg

    return VARIABLE.sub(one, text).replace("$$", "$")


def strings(node: Any) -> Iterator[str]:
    """Every string value anywhere in the YAML (merged anchors included)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)


def recur_services() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in compose()["services"].items()
            if (s.get("command") or [""])[0] == "recur"}


def test_services_and_one_worker_per_bucket() -> None:
    services = compose()["services"]
    assert {"rabbitmq", "redis", "postgres", "flower", "scheduler", "seed"} <= set(services)
    for bucket in BUCKETS:
        worker = services[f"worker-{bucket.name}"]
        assert worker["command"] == ["recur", "worker", bucket.name]
        assert worker["depends_on"]["rabbitmq"]["condition"] == "service_healthy"
    assert "management" in services["rabbitmq"]["image"]


def test_every_long_running_service_has_a_health_check() -> None:
    services = compose()["services"]
    for name in ["rabbitmq", "redis", "postgres", *(f"worker-{b.name}" for b in BUCKETS)]:
        assert "healthcheck" in services[name], name


def test_credentials_come_from_env_file_only() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    for secret in re.findall(r"^\s*\w*PASS\w*:\s*(\S+)", text, re.MULTILINE):
        assert secret.startswith("${"), f"literal secret in docker-compose.yml: {secret}"
    example = (ROOT / ".env.example").read_text()
    for var in set(re.findall(r"\$\{(\w+)", text)):
        assert f"{var}=" in example, f"{var} used by docker-compose.yml, missing from .env.example"


def host_address(port: Any) -> str | None:
    """The host address a ``ports:`` entry publishes on (None: every interface)."""
    if isinstance(port, dict):
        return port.get("host_ip")
    parts = str(port).rsplit(":", 2)
    return parts[0] if len(parts) == 3 else None


def is_loopback_or_operators_choice(address: str | None) -> bool:
    if address is None:
        return False
    m = VARIABLE.fullmatch(address)
    if m is not None:  # the operator's variable: its default must be loopback
        if m.group(2) not in (":-", "-"):
            return False
        address = m.group(3)
    try:
        return ipaddress.ip_address((address or "").strip("[]")).is_loopback
    except ValueError:
        return False


def test_every_published_port_is_bound_to_loopback_unless_the_operator_says() -> None:
    published = [(name, port) for name, s in compose()["services"].items()
                 for port in s.get("ports", [])]
    assert len(published) >= 8
    for name, port in published:
        assert is_loopback_or_operators_choice(host_address(port)), (
            f"{name} publishes {port!r} on every interface: bind it to 127.0.0.1 or "
            f"${{PUBLISH_ADDR:-127.0.0.1}}")


@pytest.mark.parametrize(("port", "ok"), [
    ("5672:5672", False), ("0.0.0.0:5672:5672", False), ("5672", False),
    ("${PUBLISH_ADDR}:5672:5672", False), ("${PUBLISH_ADDR:-0.0.0.0}:5672:5672", False),
    ("127.0.0.1:5672:5672", True), ("${PUBLISH_ADDR:-127.0.0.1}:5672:5672", True),
    ({"target": 5672, "published": 5672}, False),
    ({"target": 5672, "published": 5672, "host_ip": "127.0.0.1"}, True)])
def test_the_port_check_tells_an_open_port_from_a_loopback_one(port: Any, ok: bool) -> None:
    assert is_loopback_or_operators_choice(host_address(port)) is ok


def test_every_password_is_required_from_env_file() -> None:
    """No default, no literal: ${VAR:?...}, so compose stops when .env lacks it."""
    for text in strings(compose()):
        for m in VARIABLE.finditer(text):
            if any(word in m.group(1) for word in SECRET_WORDS):
                assert m.group(2) == ":?", f"{m.group(0)} must be required (${{VAR:?...}})"
    for name, service in compose()["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if any(word in key for word in SECRET_WORDS) and key != "REDISCLI_AUTH":
                assert VARIABLE.fullmatch(str(value)) or "${" in str(value), (
                    f"{name}: {key} is a literal")


def test_no_credential_literal_in_any_url() -> None:
    for text in strings(compose()):
        for url in re.findall(r"\w+://\S+", text):
            userinfo = url.split("://", 1)[1].rpartition("@")[0]
            if ":" in userinfo:
                password = userinfo.split(":", 1)[1]
                assert VARIABLE.fullmatch(password), f"literal password in {url}"


def test_redis_has_a_required_password_noeviction_and_aof() -> None:
    redis = compose()["services"]["redis"]
    command = " ".join(redis["command"])
    assert re.search(r"--requirepass \"?\$\$REDIS_PASSWORD\"?", command)
    assert redis["environment"]["REDIS_PASSWORD"].startswith("${REDIS_PASSWORD:?")
    assert "--maxmemory-policy noeviction" in command and "--appendonly yes" in command
    assert "REDISCLI_AUTH" in " ".join(redis["healthcheck"]["test"])  # ping needs the password
    urls = [t for t in strings(compose()) if t.startswith(("redis://", "rediss://"))]
    assert urls and all(u.startswith("redis://:${REDIS_PASSWORD:?") for u in urls), urls


def recur_environment(service: dict[str, Any], dotenv: dict[str, str]) -> dict[str, str]:
    return {k: interpolate(str(v), dotenv) for k, v in service["environment"].items()
            if k.startswith("RECUR_")}


def test_env_example_placeholders_are_refused_by_recur() -> None:
    """Every recur process of a stack started from .env.example unchanged refuses to start."""
    dotenv = env_example()
    for name, service in recur_services().items():
        with pytest.raises(ConfigError, match="placeholder"):
            load_settings(recur_environment(service, dotenv))
        assert name


def test_env_example_has_no_password_something_would_accept() -> None:
    """A password is either a placeholder recur refuses or empty (compose stops on it)."""
    for var, value in env_example().items():
        if "PASSWORD" in var:
            assert is_placeholder(value) or value == "", f"{var}={value}"
            assert "," not in value


def test_with_real_passwords_every_recur_service_has_valid_settings() -> None:
    """Compose's RECUR_ variables are all settings recur knows, with values it accepts."""
    dotenv = {k: ("Xq7-real-secret" if "PASSWORD" in k else v) for k, v in env_example().items()}
    for name, service in recur_services().items():
        cfg = load_settings(recur_environment(service, dotenv))
        assert cfg.strict, name
        assert ":Xq7-real-secret@redis:" in cfg.redis_url


def test_metrics_are_scraped_over_the_compose_network_only() -> None:
    """Each recur process with a /metrics port listens on 0.0.0.0 in its container (for
    prometheus), is a prometheus target, and publishes that port on loopback at most."""
    prometheus = yaml.safe_load((ROOT / "config/monitoring/prometheus.yml").read_text())
    targets = {t for job in prometheus["scrape_configs"] for c in job["static_configs"]
               for t in c["targets"]}
    for name, service in recur_services().items():
        env = service["environment"]
        if "RECUR_METRICS_PORT" not in env or service.get("restart") == "no":
            continue
        assert env.get("RECUR_METRICS_BIND") == "0.0.0.0", name
        assert f"{name}:{env['RECUR_METRICS_PORT']}" in targets, name
        for port in service.get("ports", []):
            assert is_loopback_or_operators_choice(host_address(port)), name
