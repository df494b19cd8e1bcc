"""The adaptive limit's tunables; the contract's T1, Cmin, Cmax, window and settle margin come
from ``PolicyParams``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tuning:
    # Growth keeps up with the poller's ramp, at most this factor per step.
    max_growth: float = 2.0
    # A probe's step is at most this share of the level (then doubling while probes pass).
    probe_growth: float = 0.5
    # Growth needs the pressure under this share.
    grow_below: float = 0.005
    # Calls are clean under this share of pressure: a pulse probe or a test of Cmin passes
    # only under it (a level committed above it would go on drawing refused calls under T1,
    # each message back a visibility timeout later), and a level whose refused calls reach it
    # holds, neither grown nor stepped down. A history of ``clean_history_calls``
    # under it makes refusals after it a storm's first reports (``Sizing.surge_pressure``).
    clean_below: float = 0.0025
    clean_history_calls: int = 400
    # The Lambda poller's scaling: concurrent batches at first, and added each second.
    poller_start: int = 5
    poller_ramp_per_s: float = 5.0
    # The newest seconds of invocation starts, whose pressure sizes a cut.
    latest_s: int = 1
    # How far above T1 the newest second's pressure must be to show a storm beginning.
    storm_factor: float = 2.0
    # A cut sized on the first reports of a storm is corrected, for this long after it (and as
    # long again as the telemetry trails: its reports are still arriving), once
    # the invocations that started before it have reported this many times the calls (a cut
    # on timeouts: on every report more, ``Latency.correction``).
    correction_s: float = 8.0
    correction_evidence: float = 2.0
    # A correction is made at once, whatever the evidence, where the storm's worst second
    # fits under this share of the level (a second storm: ``Sizing.correction``).
    correction_at_once: float = 0.5
    # Standard errors added to the pressure that sizes a cut.
    sizing_z: float = 1.0
    # Pulse probes: how long the raised cap stands, when and how patiently its invocations are
    # judged, the backoff (first, longest) after a failure, and the share of the goodput failed
    # probes may cost. A probe's shortest pulse ends ``pulse_margin_s`` past the poller's
    # scaling step, not at it: a cap put back as the poller steps may never have run the raised
    # level, and its pulse would pass on the base level's calls (a level 2.5% over the
    # capacity, committed on a clean pulse that never ran it, went on refusing calls).
    pulse_s: float = 1.0
    pulse_margin_s: float = 0.1
    judge_after_s: float = 3.0
    judge_patience_s: float = 20.0
    probe_backoff_s: tuple[float, float] = (5.0, 25.0)
    probe_budget: float = 0.01
    probe_jitter: float = 0.2
    # Where refused calls set the ceiling, a pulse's refused calls, were the capacity at its
    # base, stay within this share of the messages waiting (``Probing.affordable_step``).
    chain_refusal_share: float = 0.03
    # Timeouts under T1 cut only where the latency moved with the concurrency: a correlation
    # of at least ``load_correlation`` over the last ``load_span_s`` seconds of invocation
    # starts, on at least ``latency_seconds`` of them (each with at least min_samples calls).
    load_correlation: float = 0.5
    load_span_s: float = 60.0
    latency_seconds: int = 3
    # A load-driven timeout cut aims at this share of the timeout on the load line.
    timeout_headroom: float = 0.8
    # Pausing below the floor: the period (first, longest), the pressure at Cmin that calls
    # for it, and the share of what Cmin sends over a pause that its failed test may cost.
    pause_s: tuple[float, float] = (15.0, 60.0)
    # The longest pause after a blind test of Cmin failed. Longer than ``pause_s``'s, which
    # bounds the announced phase's, whose tests cost one answer: a blind test costs refused
    # calls until its first report (up to 40 s in the families), and under a capacity below
    # Cmin for good each test's refused messages come back to the next test (a test every
    # 2 minutes dead-lettered 2,242 messages on one families draw, 525 with 300 s). It bounds
    # how late a returned capacity is found.
    failed_test_pause_max_s: float = 300.0
    pause_above: float = 0.12
    pause_budget: float = 0.02
    # A test of Cmin passes only where its pressure, this many standard errors up, is under
    # the pausing pressure: a test of a second reports 20-30 calls, and a capacity just under
    # what Cmin sends refuses 2 of them as often as not (long-recovery, seeds 1-10: one
    # standard error up, wasted 0.041; two, 0.038).
    pause_test_z: float = 2.0
    # A cut whose fitting level (in use x the pessimistic accepted share) would leave Cmin at
    # least this pressure pauses at once: Cmin overloads far beyond doubt, and running it until
    # fresh evidence says so costs seconds of its calls.
    pause_at_once: float = 0.75
    # In-use estimates at least this share of the cap mean the poller fills the cap.
    saturated_share: float = 0.6
    estimate_span_s: float = 10.0
    # Growth needs at least this share of the cap in use over the window (the poller's ramp
    # after the last step included).
    used_share: float = 0.5
    # Announced limits: the seconds of invocation starts before the newest announcement whose
    # calls per invocation-second size the announced level, and whose 429s naming a
    # concurrency limit set the announced phase aside.
    announced_span_s: float = 30.0
    # A rise of the announced level is raised to once the fit, less this share, still reaches
    # a level above the one announced before: a pace measured a little differently from one
    # decision to the next must not move the mapping up and down around a whole level.
    announced_hysteresis: float = 0.05
