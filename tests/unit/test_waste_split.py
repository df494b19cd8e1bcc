"""The split of a policy's waste by kind and phase (load/waste_split.py): every wasted call of
the run lands in one phase, the blind seconds as load.blind_waste counts them, and the phases
follow the policy's own decisions."""

from __future__ import annotations

from controller.model import Action, AuditEntry, AuditEvent
from load import blind_waste as bw
from load import waste_split as ws
from load.scorecard import scorecard
from load.sim.engine import SIM_EPOCH, simulate
from load.sim.families import draw_scenario
from load.simulate import make_policy

# mixed seed 100 draw 27: the capacity drops 139 -> 52 calls/s at 74 s as the latency rises
# 89 -> 199 ms, under bursts of arrivals; refused calls in the blind seconds, before the first
# cut, after a cut whose level still did not fit, and after raises.
DRAW = ("mixed", 100, 27)


def test_every_wasted_call_of_the_run_is_in_one_phase_and_the_blind_ones_as_counted() -> None:
    split = ws.draw_split((*DRAW, "queuemesh"))
    totals = scorecard(simulate(draw_scenario(*DRAW), make_policy("queuemesh", "adaptive")))[
        "totals"
    ]
    assert split.calls == totals["calls_total"]
    assert sum(split.wasted.values()) == totals["calls_rejected"]
    assert (
        sum(split.wasted.get((phase, ws.TIMED_OUT), 0) for phase in ws.PHASES)
        == totals["calls_timed_out"]
    )
    assert split.wasted["blind", ws.REFUSED] == bw.draw_waste(DRAW).blind
    # A cut whose level still did not fit wasted less than the reaction before it.
    assert split.share("seen") > split.share("held") > 0


def test_a_policy_that_never_cuts_wastes_only_before_its_first_cut() -> None:
    split = ws.draw_split((*DRAW, "static"))
    assert {phase for phase, _ in split.wasted} <= {"blind", "unseen", "seen", "no level"}


def test_a_pulses_end_is_its_probes_and_a_pause_a_cut() -> None:
    def entry(at: float, action: Action, before: int, after: int) -> AuditEntry:
        return AuditEntry("q", SIM_EPOCH + at, AuditEvent.TRANSITION, before, after, action, "")

    trail = [
        entry(30.0, Action.HOLD, 20, 20),
        entry(10.0, Action.MULTIPLICATIVE_DECREASE, 40, 20),
        entry(50.0, Action.ADDITIVE_INCREASE, 20, 25),
        entry(52.0, Action.PROBE_END, 25, 20),
        entry(90.0, Action.PAUSE, 2, 2),
        entry(120.0, Action.RESUME, 2, 2),
    ]
    assert ws.level_changes(trail) == [(10.0, False), (50.0, True), (90.0, False), (120.0, True)]


def test_the_report_splits_the_mean_by_kind_phase_and_shape() -> None:
    rows = [
        ws.DrawSplit(1, "mixed: drop capacity, 1 ms", "constant", 1000, {("blind", 0): 50}),
        ws.DrawSplit(
            2, "mixed: cliff capacity, 2 ms", "queueing", 1000, {("held", 1): 30, ("blind", 1): 10}
        ),
    ]
    report = ws.render("mixed", 100, "queuemesh", rows, most=1)
    lines = report.splitlines()
    assert lines[0].endswith("mean wasted 0.0450 = refused 0.0250 + timed out 0.0200")
    assert lines[2] == "blind       0.0250     0.0050"
    assert lines[8] == "held        0.0000     0.0150"
    assert "mixed: cliff capacity (queueing)" in lines[10]
    assert lines[-1] == "     2: 0.040 / 0.010  mixed: cliff capacity, 2 ms"
