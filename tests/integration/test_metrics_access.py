"""Every /metrics listens on RECUR_METRICS_BIND (127.0.0.1 unless the operator says
otherwise) and, with RECUR_METRICS_USER / RECUR_METRICS_PASSWORD, answers 401 to a scrape
without those credentials: the server in-process on a real socket, and a real scheduler."""

from __future__ import annotations

import base64
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter

from config.settings import load_settings
from tasks.metrics import serve as metrics_serve
from tasks.metrics.serve import serve_metrics
from tests.support import services
from tests.support.processes import Child, recur_argv, spawn, wait_for

AUTH = {"RECUR_METRICS_USER": "prom", "RECUR_METRICS_PASSWORD": "s3cret:with,odd@chars"}


def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Counter("recur_test_scrapes", "A counter only this test's registry has.",
            registry=reg).inc(7)
    return reg


def serve(**env: str) -> int:
    port = services.free_port()
    cfg = load_settings({"RECUR_METRICS_PORT": str(port), **env})
    assert serve_metrics(cfg, registry()) == port
    return port


def header(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def get(host: str, port: int, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.get(f"http://{host}:{port}/metrics", headers=headers, timeout=5)


def test_with_credentials_set_every_scrape_without_them_gets_401() -> None:
    port = serve(**AUTH)
    refused = [
        None,
        header("prom", "wrong"),
        header("other", AUTH["RECUR_METRICS_PASSWORD"]),
        header("prom", AUTH["RECUR_METRICS_PASSWORD"] + "x"),
        header("prom", AUTH["RECUR_METRICS_PASSWORD"][:-1]),
        header("", ""),
        {"Authorization": "Bearer " + base64.b64encode(b"prom:x").decode()},
        {"Authorization": "Basic not-base64!!"},
        {"Authorization": "Basic " + base64.b64encode(b"no-colon-at-all").decode()},
        {"Authorization": "Basic"},
    ]
    for headers in refused:
        answer = get("127.0.0.1", port, headers)
        assert answer.status_code == 401, headers
        assert answer.headers["WWW-Authenticate"].startswith("Basic realm=")
        assert "recur_test_scrapes" not in answer.text
    answer = get("127.0.0.1", port, header("prom", AUTH["RECUR_METRICS_PASSWORD"]))
    assert answer.status_code == 200 and "recur_test_scrapes_total 7.0" in answer.text


def test_without_credentials_the_default_bind_serves_this_host_only() -> None:
    port = serve()
    assert "recur_test_scrapes_total 7.0" in get("127.0.0.1", port).text
    with pytest.raises(httpx.ConnectError):  # another address of this host: not bound
        get("127.0.0.2", port)


def test_an_explicit_bind_to_every_interface_is_reachable_and_warned_about(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="recur.metrics"):
        port = serve(RECUR_METRICS_BIND="0.0.0.0")
    assert get("127.0.0.2", port).status_code == 200
    assert any("open to anyone" in r.getMessage() for r in caplog.records)
    with caplog.at_level(logging.WARNING, logger="recur.metrics"):
        caplog.clear()
        port = serve(RECUR_METRICS_BIND="0.0.0.0", **AUTH)
    assert get("127.0.0.2", port).status_code == 401
    assert not caplog.records


@pytest.fixture
def start_recur(tmp_path: Path) -> Iterator[Any]:
    children: list[Child] = []

    def start(name: str, args: list[str], env: dict[str, str]) -> Child:
        full = {**os.environ, **services.test_environment(), **env}
        child = spawn(name, recur_argv(*args), tmp_path / "logs", full, cwd=services.ROOT)
        children.append(child)
        return child

    yield start
    for child in children:
        child.stop()


def scrape(child: Child, port: int, headers: dict[str, str] | None) -> int | None:
    if child.proc.poll() is not None:
        raise RuntimeError(f"{child.name} exited:\n{child.log()[-3000:]}")
    try:
        answer = get("127.0.0.1", port, headers)
    except httpx.TransportError:
        return None
    return answer.status_code if "recur_scheduler" in answer.text or answer.status_code != 200 \
        else None


@pytest.mark.services
def test_a_real_scheduler_asks_for_its_metrics_credentials(
        live_services: None, fresh_pg_url: str, start_recur: Any) -> None:
    port = services.free_port()
    scheduler = start_recur("scheduler", ["scheduler"], {
        "RECUR_DATABASE_URL": fresh_pg_url, "RECUR_METRICS_PORT": str(port), **AUTH})
    good = header("prom", AUTH["RECUR_METRICS_PASSWORD"])
    wait_for(lambda: scrape(scheduler, port, good) == 200, 60, "the scheduler's /metrics")
    assert scrape(scheduler, port, None) == 401
    assert scrape(scheduler, port, header("prom", "guess")) == 401
    with pytest.raises(httpx.ConnectError):
        get("127.0.0.2", port, good)
    assert "s3cret" not in scheduler.log()


def raw(port: int, data: bytes, timeout: float = 5) -> bytes:
    """What the server answers ``data`` with, up to its close (b"" when it just closes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
        return answer


def test_hostile_requests_are_refused_and_the_endpoint_keeps_serving() -> None:
    port = serve(**AUTH)
    good = "Authorization: Basic " + base64.b64encode(
        f"prom:{AUTH['RECUR_METRICS_PASSWORD']}".encode()).decode()
    hostile = {
        f"GET /../../etc/passwd HTTP/1.1\r\n{good}\r\n\r\n".encode(): b" 404 ",
        f"GET /%2e%2e/x HTTP/1.1\r\n{good}\r\n\r\n".encode(): b" 404 ",
        f"GET /favicon.ico HTTP/1.1\r\n{good}\r\n\r\n".encode(): b" 404 ",
        b"GET /../../etc/passwd HTTP/1.1\r\n\r\n": b" 401 ",  # no path probing unlogged
        f"DELETE /metrics HTTP/1.1\r\n{good}\r\n\r\n".encode(): b" 405 ",
        b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n": b" 414 ",
        b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n": b" 431 ",
        b"GET /metrics HTTP/9.9\r\n\r\n": b"505",  # http.server's page: no status line
        bytes(range(256)) + b"\r\n\r\n": b"400",
    }
    for request, status in hostile.items():
        answer = raw(port, request)
        assert status in answer, (request[:60], answer[:300])
        assert b"Traceback" not in answer and b"recur_test_scrapes" not in answer
    assert get("127.0.0.1", port, header("prom", AUTH["RECUR_METRICS_PASSWORD"])
               ).status_code == 200


def test_slow_and_silent_clients_are_cut_off_and_cost_bounded_threads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_serve, "REQUEST_SECONDS", 1.0)
    monkeypatch.setattr(metrics_serve, "MAX_CONNECTIONS", 4)
    port = serve()
    threads = threading.active_count()
    silent = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(20)]
    wait_for(lambda: all(s.recv(1) == b"" for s in silent), 10, "silent clients cut off")
    assert threading.active_count() <= threads + 4 + 1
    slow = socket.create_connection(("127.0.0.1", port), timeout=10)
    started = time.monotonic()
    with pytest.raises(OSError):  # a header byte every 0.2 s: cut at the 1 s deadline
        for byte in b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 100:
            slow.send(bytes([byte]))
            time.sleep(0.2)
    assert time.monotonic() - started < 8
    for s in [*silent, slow]:
        s.close()
    wait_for(lambda: get("127.0.0.1", port).status_code == 200, 10, "a scrape after them")
