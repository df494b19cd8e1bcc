"""The fleet benchmark on moto counts the controller's control-plane calls (no timing here)."""

from __future__ import annotations

import pytest


def test_a_batch_of_changes_costs_one_listing_and_an_update_each() -> None:
    from load.bench.fleet import measure
    from stack.local.emulator import EmbeddedAws

    with EmbeddedAws() as aws:
        report = measure(aws.endpoint, 6, timeout_s=30, max_invocations=3)

    assert report["readback"]["matching_ledger"] == 6
    assert (report["update_calls"], report["list_calls"], report["get_calls"]) == (6, 1, 0)
    assert report["control_plane_calls"] == 7
    assert report["calls_ratio"] == 1.0


def test_a_storm_on_part_of_a_fleet_is_cut_whole_at_the_paced_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 31.4 in small: the storm's queues all cut, within 1.1x the time their calls
    take at the controller's pace, never over the account's quota; every queue decided."""
    from load.bench import fleet_storm

    monkeypatch.setattr(fleet_storm, "MEMORY_BATCHES", 4)
    monkeypatch.setattr(fleet_storm, "MEMORY_SAMPLES_EVERY", 2)
    report = fleet_storm.measure(150, 40, timeout_s=120.0, max_invocations=5)

    assert report["invocations"][-1]["cut_so_far"] == 40
    assert report["queues_decided"] == report["queues_with_evidence"] == 150
    assert report["update_calls"] == 40
    assert report["control_plane_refused"] == 0
    assert report["max_calls_in_any_1s"] <= 12
    assert report["all_applied_ceiling_ratio"] <= 1.1
    assert len(report["memory_bytes_held"]) == len(report["twin_bytes_held"]) == 2
    assert min(report["memory_bytes_held"] + report["twin_bytes_held"]) > 0


def test_cuts_left_at_the_deadline_are_made_by_the_next_invocation_once_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from load.bench import fleet_storm

    monkeypatch.setattr(fleet_storm, "MEMORY_BATCHES", 0)
    # 12 s leaves 3 s of paced calls before the claim budget (9 s): 36 of the 40 cuts.
    report = fleet_storm.measure(150, 40, timeout_s=12.0, max_invocations=5)

    assert [run["cut_so_far"] for run in report["invocations"]] == [36, 40]
    assert report["update_calls"] == 40
    assert report["control_plane_refused"] == 0
