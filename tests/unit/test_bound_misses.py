"""The bound-miss listing (load/bound_misses.py): its lines are the draws the scorecard counts
outside the bound rule, and its cause reads where the law fell behind the bound."""

from __future__ import annotations

import dataclasses

from load import bound_misses as bm
from load.simulate import run_family

# throttling seed 7, draws 1-4: the bound applies to all four; the law misses on drain alone on
# draw 3 (below the floor, then back: a slow climb) and draw 4 (a drop, 39 messages behind).
# Knowing the return a report late costs draw 3 alone too (the lagged bound drains 1.361 where
# the bound drains 1.203), and so does learning it by doubling.
FAMILY, SEED, DRAWS = "throttling", 7, 4


def test_the_lines_and_the_summary_are_the_scorecards_count() -> None:
    misses = bm.classify(FAMILY, SEED, DRAWS)
    bounded, rows = misses.bounded, misses.rows
    law, lagged, climbing = run_family(
        FAMILY, SEED, DRAWS, ["queuemesh", "hindsight-lagged", "hindsight-climbing"], "adaptive"
    )
    assert bounded - len(rows) == law["draws_within_bound_rule"] == 2
    within = {bound["policy"]: bound["draws_within_bound_rule"] for bound in (lagged, climbing)}
    assert within == {"hindsight-lagged": 3, "hindsight-climbing": 3}
    assert misses.later_within == {"lagged": 3, "climbing": 3}
    assert [
        (row["draw"], row["missed"], row["cause"], row["lagged"], row["climbing"]) for row in rows
    ] == [
        (3, "drain", "slow climb", "out", "out"),
        (4, "drain", "tail", "in", "in"),
    ]
    assert all(row["drain"] > 1.1 * row["bound_drain"] for row in rows)
    assert len(bm.render(rows).splitlines()) == 1 + len(rows)
    assert bm.summary(misses).splitlines() == [
        "within the rule: 2 of 4 draws the bound applies to",
        "by shape: below-floor 1 (drain 1); drop 1 (drain 1)",
        "by limit: drain 2",
        "by cause (drain alone): slow climb 1, tail 1",
        "the bound a report late on rises (hindsight-lagged) within the rule: 3 of 4; outside "
        "it on 1 of the law's 2 misses",
        "the bound that learns a rise by doubling (hindsight-climbing) within the rule: 3 of 4; "
        "outside it on 1 of the law's 2 misses",
    ]


def test_other_realizations_say_which_misses_are_the_dice() -> None:
    # The same four draws, each again with its scenario's seed moved by one: the law misses
    # draws 3 and 4 there too, and the bound on the other dice stays within its own rule.
    misses = bm.classify(FAMILY, SEED, DRAWS, realizations=1)
    assert [(row["draw"], row["again"]) for row in misses.rows] == [(3, 1), (4, 1)]
    assert (misses.law_within_again, misses.bound_outside_again) == ([2], [0])
    assert misses.missed_on_every == 2
    assert bm.summary(misses).splitlines()[-1] == (
        "under 1 other realization of each draw (its scenario's seed +1): the law within the "
        "rule on 2; outside it on every realization on 2 draws; the bound outside the rule "
        "judged against its own first run on 0"
    )
    # Other dice, the same draw: only the seed moved.
    scenario, other = (bm.realization(FAMILY, SEED, 3, shift) for shift in (0, 1))
    assert other.seed == scenario.seed + 1
    assert dataclasses.replace(other, seed=scenario.seed) == scenario


def test_a_miss_a_later_bound_shares_is_marked_out_in_its_column() -> None:
    row = {
        "draw": 9, "shape": "drop", "delay_s": (20, 30), "noise": 0.0, "wasted": 0.1,
        "bound_wasted": 0.05, "drain": 1.5, "bound_drain": 1.2, "missed": "drain",
        "lag_s": 40.0, "behind": 900, "caps": "3/9", "cause": "slow climb", "lagged": "in",
        "climbing": "out", "again": None,
    }  # fmt: skip
    assert bm.render([row]).splitlines()[1].endswith("slow climb    in     out      -")
    within = {"lagged": 4, "climbing": 3}
    assert bm.summary(bm.Misses(5, within, [row])).splitlines()[-2:] == [
        "the bound a report late on rises (hindsight-lagged) within the rule: 4 of 5; outside "
        "it on 0 of the law's 1 misses",
        "the bound that learns a rise by doubling (hindsight-climbing) within the rule: 3 of 5; "
        "outside it on 1 of the law's 1 misses",
    ]


def _run(ok_per_s: list[int], drain_s: float, caps: list[int]) -> bm.Run:
    # A capacity that falls at 10 s and returns at 20 s.
    return bm.Run(
        {"drain_s": drain_s}, tuple(ok_per_s), tuple(caps), ((0, 100), (10, 20), (20, 100))
    )


def test_a_law_far_behind_after_the_return_climbs_slowly() -> None:
    bound = _run([100] * 30, 30, [10] * 30)
    law = _run([100] * 20 + [10] * 10 + [100] * 9, 39, [10] * 20 + [2] * 19)
    assert bm.cause(law, bound) == {
        "lag_s": 9.0,
        "behind": 800,
        "caps": "2/10",
        "cause": "slow climb",
    }


def test_a_law_behind_before_the_return_cut_too_low() -> None:
    bound = _run([100] * 30, 30, [10] * 30)
    law = _run([100] * 10 + [10] * 10 + [100] * 19, 39, [10] * 39)
    assert bm.cause(law, bound)["cause"] == "before return"


def test_a_few_messages_behind_is_a_tail_and_an_undrained_bound_says_nothing() -> None:
    bound = _run([100] * 30, 30, [10] * 30)
    law = _run([100] * 29 + [90, 10], 31, [10] * 31)
    assert bm.cause(law, bound)["cause"] == "tail"
    undrained = bm.Run({"drain_s": None}, (1,), (1,), ((0, 1),))
    assert bm.cause(law, undrained)["cause"] == "-"
