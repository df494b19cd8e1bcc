"""The fleet benchmark on moto counts the controller's control-plane calls (no timing here)."""

from __future__ import annotations


def test_a_batch_of_changes_costs_one_listing_and_an_update_each() -> None:
    from load.bench.fleet import measure
    from stack.local.emulator import EmbeddedAws

    with EmbeddedAws() as aws:
        report = measure(aws.endpoint, 6, timeout_s=30, max_invocations=3)

    assert report["readback"]["matching_ledger"] == 6
    assert (report["update_calls"], report["list_calls"], report["get_calls"]) == (6, 1, 0)
    assert report["control_plane_calls"] == 7
    assert report["calls_ratio"] == 1.0
