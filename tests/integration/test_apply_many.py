"""``task.apply_many`` (tasks/many.py, scheduler/store/enqueue.py): many calls in one
transaction, on the COPY path on PostgreSQL; every row what ``apply_async`` would have
written; a bad call refused by its index, and then nothing written. SQLite and
PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from config.errors import InvalidMessage, InvalidSchedule, UnknownBucket, one_line
from scheduler.store import DueStore
from scheduler.wire import decode_call
from tasks.process import process_message
from tests.integration.test_group_commit import keys_in, other_connection


def message(ident: str, n: Any = 1, **extra: Any) -> dict[str, Any]:
    return {"id": ident, "user_id": "u-1", "bucket": "short", "payload": {"n": n}, **extra}


def row(url: str, key: str) -> dict[str, Any]:
    with other_connection(url) as conn:
        mark = "%s" if not url.startswith("sqlite") else "?"
        got = conn.execute("SELECT state, token, attempts, turn, args, due_at, early_at "
                           f"FROM due_jobs WHERE job_key = {mark}", (key,)).fetchone()
    state, token, attempts, turn, args, due, early = got
    return {"state": state, "token": token, "attempts": attempts, "turn": turn, "args": args,
            "due_at": moment(due), "early_at": moment(early)}


def moment(value: Any) -> datetime:
    if isinstance(value, str):  # SQLite: naive UTC text
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def all_keys(url: str) -> list[str]:
    with other_connection(url) as conn:
        return sorted(keys_in(conn))


def test_every_call_is_written_in_one_go(store_url: str, store_in_use: DueStore) -> None:
    calls = [message(f"m-{i}", i) for i in range(1500)]
    before = datetime.now(UTC)
    keys = process_message.apply_many(calls, countdown=3600)
    assert keys == [f"m-{i}" for i in range(1500)]
    assert all_keys(store_url) == sorted(keys)
    got = row(store_url, "m-7")
    args, kwargs, retries = decode_call(got["args"], "m-7", "short")
    assert (args, kwargs, retries) == ([message("m-7", 7)], {}, 0)
    assert before + timedelta(seconds=3600) <= got["due_at"] <= datetime.now(UTC) + timedelta(
        seconds=3600)
    assert (got["state"], got["token"], got["turn"]) == (0, 0, 0)


def test_call_forms_and_their_own_options(store_url: str, store_in_use: DueStore) -> None:
    eta = datetime(2031, 5, 1, tzinfo=UTC)
    keys = process_message.apply_many([
        message("as-dict"),                                          # its one argument
        (message("as-args"),),                                       # its args
        process_message.s(message("sig")).set(eta=eta, job_key="report-1"),
        process_message.s(message("floor")).set(not_before=True),
    ], countdown=600)
    assert keys == ["as-dict", "as-args", "report-1", "floor"]
    assert row(store_url, "report-1")["due_at"] == eta
    floor = row(store_url, "floor")
    assert floor["early_at"] == floor["due_at"]  # not_before: its time is a floor
    now_due = process_message.apply_many([message("no-delay")])  # due now, via the store
    assert now_due == ["no-delay"]
    assert row(store_url, "no-delay")["due_at"] <= datetime.now(UTC)
    past = datetime(2000, 1, 1, tzinfo=UTC)  # an eta already past: overdue, via the store
    assert process_message.apply_many([message("past")], eta=past) == ["past"]
    assert row(store_url, "past")["due_at"] == past


def test_calls_of_one_shape_share_the_signature_check(store_url: str,
                                                       store_in_use: DueStore) -> None:
    """The verdict is kept per shape (how many args, which keywords): a misfit is still
    refused at its own index after calls of another shape passed."""
    calls: list[Any] = [message(f"s-{i}") for i in range(3)]
    calls += [(message("two"), "extra"), message("s-3")]
    with pytest.raises(InvalidMessage, match="apply_many item 3: args: do not fit"):
        process_message.apply_many(calls, countdown=60)
    assert all_keys(store_url) == []


def test_a_key_given_twice_keeps_its_last_call(store_url: str, store_in_use: DueStore) -> None:
    process_message.apply_many([message("twice", "first"), message("other"),
                                message("twice", "last")], countdown=3600)
    assert all_keys(store_url) == ["other", "twice"]
    args, _, _ = decode_call(row(store_url, "twice")["args"], "twice", "short")
    assert args == [message("twice", "last")]


def prepare(url: str, prefix: str) -> None:
    """Rows in every state a producer's write can meet, under keys ``prefix-…``."""
    process_message.apply_many([message(f"{prefix}-{s}") for s in
                                ("sched", "disp", "aside", "dealt", "floor")], countdown=3600)
    with other_connection(url) as conn:
        mark = "%s" if not url.startswith("sqlite") else "?"
        for sql, key in [("state = 1, token = 3, attempts = 1", "disp"),
                         ("state = 2, attempts = 4", "aside"), ("turn = 5", "dealt"),
                         (f"early_at = {mark}", "floor")]:
            params: tuple[Any, ...] = (f"{prefix}-{key}",)
            if key == "floor":
                far = datetime(2040, 1, 1)
                params = (far if url.startswith("sqlite") else far.replace(tzinfo=UTC),
                          *params)
            conn.execute(f"UPDATE due_jobs SET {sql} WHERE job_key = {mark}", params)
        if url.startswith("sqlite"):
            conn.commit()


def test_existing_rows_take_a_call_as_apply_async_would(
        store_url: str, store_in_use: DueStore) -> None:
    prepare(store_url, "a")
    prepare(store_url, "b")
    states = ("sched", "disp", "aside", "dealt", "floor")
    for state in states:
        process_message.apply_async((message(f"a-{state}", 2),), countdown=7200)
    process_message.apply_many([message(f"b-{state}", 2) for state in states], countdown=7200)
    for state in states:
        by_async, by_many = row(store_url, f"a-{state}"), row(store_url, f"b-{state}")
        assert abs(by_async.pop("due_at") - by_many.pop("due_at")) < timedelta(seconds=30)
        assert by_async.pop("args").replace("a-", "b-") == by_many.pop("args")
        assert by_async == by_many, state


BAD_AT = 700


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(("bad", "error", "words"), [
    (message("x", bucket="huge"), UnknownBucket, "bucket"),
    (message("x", payload="x" * 5000), InvalidMessage, "payload"),
    (process_message.s(message("x")).set(countdown=-1), InvalidSchedule, "countdown"),
    (process_message.s(message("x")).set(job_key=""), InvalidSchedule, "job_key"),
    (42, InvalidSchedule, "got int"),
    ((message("x"), "extra"), InvalidMessage, "do not fit tasks.process_message"),
    (process_message.s(message("x"), n=1), InvalidMessage, "unexpected keyword argument"),
    (message("x", payload=nested(3000)), InvalidMessage, "nested too deeply"),
])
@pytest.mark.parametrize("existing", [False, True], ids=["new-keys", "existing-keys"])
def test_a_bad_call_is_refused_by_its_index_and_nothing_is_written(
        store_url: str, store_in_use: DueStore, bad: Any, error: type[Exception],
        words: str, existing: bool) -> None:
    calls: list[Any] = [message(f"m-{i}") for i in range(1000)]
    if existing:  # every key already there: the second write merges (and so stages the
        for _ in range(2):  # third's rows as it checks them)
            process_message.apply_many(calls, countdown=60)
    before = {key: row(store_url, key) for key in ("m-0", "m-999")} if existing else {}
    calls[BAD_AT] = bad
    with pytest.raises(error) as refused:
        process_message.apply_many(calls, countdown=7200)
    line = one_line(refused.value)
    assert line is not None and "\n" not in line
    assert f"apply_many item {BAD_AT}: " in line and words in line
    assert all_keys(store_url) == (sorted(f"m-{i}" for i in range(1000)) if existing else [])
    assert {key: row(store_url, key) for key in before} == before


def test_options_that_name_one_call_and_foreign_signatures_are_refused(
        store_in_use: DueStore) -> None:
    with pytest.raises(InvalidSchedule, match="job_key names one call"):
        process_message.apply_many([message("a")], job_key="k")
    other = process_message.app.signature("tasks.other", args=(message("a"),))
    with pytest.raises(InvalidSchedule, match=r"apply_many item 0: a signature of 'tasks\.other'"):
        process_message.apply_many([other])


def test_earlier_results_are_forgotten_only_when_the_calls_are_written(
        store_in_use: DueStore) -> None:
    from tests.support.result_tasks import answer

    for key in ("r-1", "r-2"):
        answer.backend.store_result(key, {"answer": 0}, "SUCCESS")
    with pytest.raises(UnknownBucket):
        answer.apply_many([message("r-1"), message("r-2", bucket="huge")], countdown=3600)
    assert answer.backend.get_task_meta("r-1", cache=False)["status"] == "SUCCESS"
    answer.apply_many([message("r-1"), message("r-2")], countdown=3600)
    assert [answer.backend.get_task_meta(key, cache=False)["status"]
            for key in ("r-1", "r-2")] == ["PENDING", "PENDING"]
