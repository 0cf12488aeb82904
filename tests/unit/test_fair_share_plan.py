"""How a look deals the rows it read into rounds (scheduler/fair_share.plan_rounds)."""

from __future__ import annotations

from scheduler.fair_share import Slot, plan_rounds


def rows(user: str, count: int, start: int = 0) -> list[tuple[str, str | None]]:
    return [(f"{user}{i}", user) for i in range(start, start + count)]


def test_a_dominant_user_gets_one_slice_beside_the_others_and_keeps_its_bulk() -> None:
    known: dict[str | None, Slot] = {}
    turns = plan_rounds(rows("a", 50) + rows("q", 1) + rows("r", 2), 3, 1, known, 1000)
    assert turns == {"a0": 1, "a1": 1, "a2": 1, "q0": 1, "r0": 1, "r1": 1}
    assert known["a"] == Slot(2) and known["r"] == Slot(1, 2)


def test_two_heavy_users_take_turns_round_by_round_until_one_runs_out() -> None:
    turns = plan_rounds(rows("a", 7) + rows("b", 20), 2, 4, {}, 1000)
    by_round: dict[int, list[str]] = {}
    for key, turn in turns.items():
        by_round.setdefault(turn, []).append(key)
    assert by_round == {4: ["a0", "a1", "b0", "b1"], 5: ["a2", "a3", "b2", "b3"],
                        6: ["a4", "a5", "b4", "b5"], 7: ["a6", "b6", "b7"]}


def test_a_user_dealt_before_goes_on_after_its_last_rows() -> None:
    known: dict[str | None, Slot] = {"a": Slot(6, 1), "gone": Slot(2, 3)}
    turns = plan_rounds(rows("a", 4) + rows("b", 4) + rows("gone", 1), 2, 5, known, 1000)
    # a fills its round 6; b and the user whose rounds were claimed start at 5; once a
    # is alone its rows stay where they are
    assert turns == {"b0": 5, "b1": 5, "gone0": 5, "a0": 6, "b2": 6, "b3": 6}


def test_a_budget_stops_the_deal() -> None:
    turns = plan_rounds(rows("a", 100) + rows("b", 100), 10, 1, {}, 25)
    assert len(turns) == 25


def test_one_user_alone_is_not_dealt() -> None:
    assert plan_rounds(rows("a", 500), 3, 1, {}, 1000) == {}
