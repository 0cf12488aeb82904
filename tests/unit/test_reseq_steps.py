"""A resequencer step is the destination's own or registered as one; its result is
bounded (tasks/reseq_steps.py)."""

from __future__ import annotations

from typing import Any

import pytest

from config.errors import PermanentFailure, ResultTooLarge, UnknownStep
from config.settings import load_settings
from tasks.reseq_steps import check_result, is_step, reseq_step, step_for
from tests.support.resequencer_work import ASYNC_STEP, STEP, async_work, random_work

CFG = load_settings({"RECUR_DESTINATIONS": "a:http://127.0.0.1:9/a,b:http://127.0.0.1:9/b",
                     "RECUR_RESEQ_STEPS": f"a:{STEP}", "RECUR_RESEQ_MAX_ENTRY_BYTES": "100"})


def test_the_destinations_own_step_or_a_registered_step_is_accepted() -> None:
    assert step_for("a", None, CFG) == STEP  # the destination's own
    assert step_for("b", None, CFG) is None  # none: the simulated work
    assert step_for("a", STEP, CFG) == STEP
    assert step_for("a", random_work, CFG) == STEP
    assert step_for("b", ASYNC_STEP, CFG) == ASYNC_STEP  # registered with @reseq_step
    assert step_for("b", async_work, CFG) == ASYNC_STEP


@pytest.mark.parametrize("step", [
    STEP,  # a's step, not b's, and not registered as a step
    "tasks.process_message",  # any other task of the worker
    "tasks.resequence_send",
    "no.such.task",
])
def test_any_other_task_is_refused_by_name(step: str) -> None:
    with pytest.raises(UnknownStep, match=f"step: {step!r} is not destination 'b'"):
        step_for("b", step, CFG)


def test_reseq_step_marks_a_task_or_its_function() -> None:
    def plain(message: Any) -> Any:
        return message

    assert not is_step(plain)
    assert reseq_step(plain) is plain and is_step(plain)
    assert is_step(type("T", (), {"run": plain})())


def test_a_result_over_the_cap_or_not_json_is_refused_by_name() -> None:
    check_result({"x": "y" * 80}, "a", 1, "m-1", CFG)
    with pytest.raises(ResultTooLarge, match=r"'a' seq 2.*m-2.*over RECUR_RESEQ_MAX_ENTRY_BYTES"
                                             r"=100"):
        check_result({"x": "y" * 100}, "a", 2, "m-2", CFG)
    with pytest.raises(PermanentFailure, match="not JSON"):
        check_result({b"bytes"}, "a", 3, "m-3", CFG)
    for strict in (float("nan"), {"x": float("-inf")}, "lone \ud800"):  # never sendable
        with pytest.raises(PermanentFailure, match="not JSON"):
            check_result(strict, "a", 4, "m-4", CFG)
