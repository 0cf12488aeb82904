"""Tracing's decisions and its row format, and that off it costs nothing: no import.

The spans themselves are tested over real processes (tests/integration/
test_tracing_workers.py); this process never starts tracing (its provider would
stay for every later test)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest

from config.errors import ConfigError
from config.settings import load_settings, problems
from routing.tracing import headers, lean, otel, wanted
from scheduler.wire import (
    DISPATCH_HEADER,
    decode_call,
    decode_traced,
    encode_call,
    with_trace,
)
from tests.support.services import ROOT

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
MESSAGE = {"id": "k1", "user_id": "u1", "bucket": "short", "payload": {"every": 1, "runs": 3}}


@pytest.mark.parametrize(("value", "environ", "on"), [
    ("auto", {}, False),
    ("auto", {"OTEL_TRACES_EXPORTER": "none"}, False),
    ("auto", {"OTEL_TRACES_EXPORTER": "console"}, True),
    ("auto", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ("auto", {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"},
     False),
    ("0", {"OTEL_TRACES_EXPORTER": "console"}, False),
    ("1", {}, True),
])
def test_tracing_is_off_unless_configured(value: str, environ: dict[str, str], on: bool) -> None:
    cfg = load_settings({"RECUR_OTEL": value})
    assert wanted(cfg, environ) is on


def test_a_setup_hook_alone_turns_it_on() -> None:
    assert wanted(load_settings({"RECUR_OTEL_SETUP": "myapp.tracing:install"}), {})


def test_a_bad_switch_is_one_line_naming_it() -> None:
    _, bad = problems({"RECUR_OTEL": "maybe"})
    assert len(bad) == 1 and bad[0].startswith("RECUR_OTEL='maybe'") and "'auto'" in bad[0]


def test_the_run_span_mode_is_full_unless_lean_is_asked() -> None:
    assert load_settings({}).otel_celery == "full"
    assert load_settings({"RECUR_OTEL_CELERY": "lean"}).otel_celery == "lean"
    _, bad = problems({"RECUR_OTEL_CELERY": "thin"})
    assert len(bad) == 1 and bad[0].startswith("RECUR_OTEL_CELERY='thin'")


def test_the_tracing_headers_match_the_scheduler_s() -> None:
    assert headers.DISPATCH_HEADER == DISPATCH_HEADER


def test_a_stored_trace_travels_in_the_full_form_and_reads_back() -> None:
    compact = encode_call([MESSAGE], {}, job_key="k1", bucket="short")
    assert compact.startswith("[")  # the array form: no room for a trace there
    traced = with_trace(compact, PARENT, 65536)
    assert json.loads(traced)["trace"] == PARENT
    assert decode_traced(traced, "k1", "short") == ([MESSAGE], {}, 0, PARENT)
    assert decode_call(traced, "k1", "short") == decode_call(compact, "k1", "short")
    assert decode_traced(compact, "k1", "short")[3] is None
    full = encode_call([MESSAGE], {"extra": 1}, 2, job_key="k1", bucket="short")
    assert decode_traced(with_trace(full, PARENT, 65536), "k1", "short") == (
        [MESSAGE], {"extra": 1}, 2, PARENT)


def test_no_trace_or_no_room_leaves_the_call_as_it_was() -> None:
    compact = encode_call([MESSAGE], {}, job_key="k1", bucket="short")
    assert with_trace(compact, None, 65536) is compact
    assert with_trace(compact, PARENT, len(compact) + 10) == compact  # never over the bound


def test_a_malformed_stored_trace_is_no_link() -> None:
    assert lean.parse_traceparent(PARENT) is not None
    for bad in (None, 7, "", "00-xyz", PARENT.replace("4bf9", "zzzz"),
                "00-" + "0" * 32 + "-00f067aa0ba902b7-01"):
        assert lean.parse_traceparent(bad) is None
    context = lean.parse_traceparent(PARENT)
    assert context is not None and otel.traceparent_of(context) == PARENT


def test_an_exporter_or_hook_that_cannot_load_is_one_clear_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_settings({"RECUR_OTEL": "1"})
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    with pytest.raises(ConfigError, match=r"no span exporter 'otlp' is installed.*"
                                          r"opentelemetry-exporter-otlp.*console"):
        otel.check(cfg)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console,none")
    otel.check(cfg)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER")
    with pytest.raises(ConfigError, match=re.escape(
            "RECUR_OTEL_SETUP='nosuch.module:install'")):
        otel.check(replace(cfg, otel_setup="nosuch.module:install"))
    otel.check(replace(cfg, otel_setup="tests.support.otel_sink:install"))  # none by default


OFF_PATH = textwrap.dedent("""
    import sys
    from datetime import UTC, datetime

    import tasks  # redis-py imports opentelemetry's metrics itself, when installed
    from routing import tracing
    from scheduler.calls import store_plan
    from scheduler.store import Claimed
    from scheduler.task_message import task_message
    from config.settings import settings

    attempts = []

    class Watch:
        def find_spec(self, name, path=None, target=None):
            if name.startswith("opentelemetry"):
                attempts.append(name)
            return None

    sys.meta_path.insert(0, Watch())
    for name in [m for m in sys.modules if m.startswith("opentelemetry")]:
        del sys.modules[name]  # so that any import now is seen
    msg = {"id": "k1", "user_id": "u1", "bucket": "short",
           "payload": {"every": 60, "runs": 3}}
    with tracing.span("recur.claim", bucket="short") as span:
        span.set(rows=1)
        span.discard()
    tracing.record("recur.lock.wait", None, key="u1")
    plan = store_plan("tasks.process_message", [msg], {}, {"countdown": 60}, None, None,
                      settings())
    now = datetime.now(UTC)
    message = task_message(Claimed("k1", "tasks.process_message", "short", plan.job.args,
                                   now, 1, now))
    print(tracing.on(), tracing.traceparent(), "trace" in plan.job.args,
          sorted(message.headers), attempts, "routing.tracing.otel" in sys.modules)
""")


def test_off_nothing_of_opentelemetry_is_imported_on_the_hot_path() -> None:
    """The calls of the claim, publish, reschedule and lock paths, with tracing off."""
    out = subprocess.run([sys.executable, "-c", OFF_PATH], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}).stdout
    assert out.split("\n")[0] == "False None False ['id', 'recur_dispatch', 'task'] [] False"
