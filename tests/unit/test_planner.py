"""The planner: pure, its steps plain data."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.model import Action, AuditEvent, Decision, Mode, QueueState, QueueStateName
from controller.planner import Plan, StepKind, describe, plan, step_for
from controller.policy.adaptive import AdaptiveMemory
from controller.policy.aimd import Aimd
from controller.policy.vegas import VegasMemory
from controller.settings import PolicyParams
from controller.window import QueueWindow
from tests.factories import config, sample, state


def storm_window(throttled: int) -> QueueWindow:
    window = QueueWindow()
    for s in range(10):
        window.add(sample(at=100.0 + s + 0.9, ok=10 - throttled, throttled=throttled))
    return window


def planned(
    mode: Mode = Mode.ACTIVE,
    throttled: int = 2,
    unsettled: bool = False,
    states: dict[str, QueueState] | None = None,
) -> Plan:
    configs = {"orders": config("orders", mode=mode)}
    return plan(
        110.0,
        ["orders", "stranger"],
        configs,
        {"orders": state()} if states is None else states,
        {"orders": storm_window(throttled)},
        lambda queue: unsettled,
        Aimd(),
        lambda _: PolicyParams(),
    )


@given(throttled=st.integers(0, 10), unsettled=st.booleans())
def test_planning_is_pure(throttled: int, unsettled: bool) -> None:
    """The same inputs, the same plan: nothing it reads is changed by planning."""
    assert planned(throttled=throttled, unsettled=unsettled) == planned(
        throttled=throttled, unsettled=unsettled
    )


def test_a_cut_is_an_update_step_with_its_claim() -> None:
    [step] = planned().steps
    assert (step.kind, step.checks_mapping) == (StepKind.UPDATE, True)
    assert step.claim is not None
    assert (step.claim.event, step.claim.previous_value, step.claim.state.concurrency) == (
        AuditEvent.TRANSITION,
        100,
        50,
    )
    assert step.claim.state.version == step.decided_from.version
    assert step.claim.control_loop_latency_ms == pytest.approx(100.0)  # evidence at 109.9


def test_a_dry_run_queue_records_with_a_marked_reason_and_never_checks_its_mapping() -> None:
    [step] = planned(Mode.DRY_RUN, unsettled=True).steps
    assert (step.kind, step.checks_mapping) == (StepKind.RECORD, False)
    assert step.claim is not None and step.claim.reason.startswith("[dry-run] ")


def test_a_steady_queue_holds_without_a_write_but_an_unsettled_one_is_checked() -> None:
    [steady] = planned(throttled=0).steps
    assert (steady.kind, steady.claim, steady.checks_mapping) == (StepKind.HOLD, None, False)
    [unsettled] = planned(throttled=0, unsettled=True).steps
    assert unsettled.checks_mapping


def held(before: object, after: object) -> Decision:
    """A HOLD at 10 whose state name stays, its algorithm's memory going from ``before`` to
    ``after``."""
    decided_from = state(10).evolve(memory=before)
    return Decision(
        "orders",
        Action.HOLD,
        10,
        10,
        decided_from.state,
        "held",
        0.0,
        1.0,
        decided_from.evolve(memory=after),
    )


@pytest.mark.parametrize(
    ("before", "after", "written"),
    [
        # The adaptive law's memory schedules what comes next: a change is written.
        (AdaptiveMemory(), AdaptiveMemory(judge_at=120.0), True),
        (AdaptiveMemory(judge_at=120.0), AdaptiveMemory(judge_at=120.0), False),
        # A peer's EWMA moves with every batch: it stays in the container.
        (VegasMemory(), VegasMemory(estimated_limit=11.0), False),
    ],
)
def test_a_hold_is_written_where_it_changes_a_memory_written_when_held(
    before: object, after: object, written: bool
) -> None:
    decision = held(before, after)
    step = step_for(
        config("orders"), decision, state(10).evolve(memory=before), 109.0, 110.0, False
    )
    assert step.kind is (StepKind.RECORD if written else StepKind.HOLD)
    assert not step.checks_mapping
    if written:
        assert step.claim is not None and step.claim.state.memory == after


def test_a_queue_without_a_state_is_left_undecided() -> None:
    empty = planned(states={})
    assert (empty.steps, empty.undecided) == ((), ("orders",))


def test_describe_is_the_dry_run_of_a_plan() -> None:
    assert describe(planned()) == [
        "update orders (esm-orders): 100 -> 50 [MULTIPLICATIVE_DECREASE] HTTP 429 breach: "
        "Error rate 20.0% >= T1 (5.0%). Applied factor Beta=0.5. Scaled from 100 -> 50."
    ]


def window_at(throttled: int) -> QueueWindow:
    window = QueueWindow()
    for s in range(10):
        window.add(sample(at=100.0 + s + 0.9, ok=10 - throttled, throttled=throttled))
    return window


def fleet_plan(queues: dict[str, tuple[int, int]]) -> Plan:
    """``queues``: name -> (429s in each of ten calls a second, the level it is at)."""
    return plan(
        110.0,
        sorted(queues),
        {queue: config(queue) for queue in queues},
        {queue: state(level, queue=queue) for queue, (_, level) in queues.items()},
        {queue: window_at(throttled) for queue, (throttled, _) in queues.items()},
        lambda queue: False,
        Aimd(),
        lambda _: PolicyParams(),
    )


def test_the_plan_spends_the_control_plane_on_cuts_first_by_pressure_then_size() -> None:
    """Issue 31.3: the executor carries steps out in plan order until its pace and deadline
    stop it, so the most urgent changes lead."""
    steps = fleet_plan(
        {"a-raise": (0, 50), "b-light": (2, 100), "c-heavy": (5, 100), "d-small": (2, 40)}
        | {"e-steady": (0, 100)}
    ).steps
    assert [(step.queue, step.decision.action) for step in steps] == [
        ("c-heavy", Action.MULTIPLICATIVE_DECREASE),
        ("b-light", Action.MULTIPLICATIVE_DECREASE),
        ("d-small", Action.MULTIPLICATIVE_DECREASE),
        ("a-raise", Action.ADDITIVE_INCREASE),
        ("e-steady", Action.HOLD),
    ]
    assert [step.cuts for step in steps] == [True, True, True, False, False]


def test_a_healthy_queues_first_cut_goes_before_a_further_cut_of_one_cut_already() -> None:
    """A queue still at its healthy level sends its whole rate into the overload and nothing
    was done for it yet; one cut already sends less."""
    steps = plan(
        110.0,
        ["cut-again", "first-cut"],
        {queue: config(queue) for queue in ("cut-again", "first-cut")},
        {
            "cut-again": state(40, QueueStateName.THROTTLED, queue="cut-again"),
            "first-cut": state(100, queue="first-cut"),
        },
        {"cut-again": window_at(6), "first-cut": window_at(2)},
        lambda queue: False,
        Aimd(),
        lambda _: PolicyParams(),
    ).steps
    assert [(step.queue, step.cuts) for step in steps] == [
        ("first-cut", True),
        ("cut-again", True),
    ]
    assert steps[1].decision.pressure_rate > steps[0].decision.pressure_rate


@given(
    st.dictionaries(
        st.text("abcdefgh", min_size=1, max_size=3),
        st.tuples(st.integers(0, 10), st.sampled_from([10, 40, 100])),
        min_size=1,
        max_size=12,
    )
)
def test_no_raise_is_planned_before_a_cut_and_a_queue_changes_once(
    queues: dict[str, tuple[int, int]],
) -> None:
    steps = fleet_plan(queues).steps
    assert sorted(step.queue for step in steps) == sorted(queues)
    ranks = [step.urgency for step in steps]
    assert ranks == sorted(ranks)
    for rank in (0, 1):  # first cuts, further cuts: each by pressure
        pressures = [step.decision.pressure_rate for step in steps if step.urgency[0] == rank]
        assert pressures == sorted(pressures, reverse=True)
