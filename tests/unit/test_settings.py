from __future__ import annotations

import pytest

from controller.constants import WINDOW_RETENTION_S
from controller.settings import PolicyParams, SettingsError


def test_defaults_are_the_original_design() -> None:
    params = PolicyParams()
    assert (params.t1, params.t2, params.beta, params.alpha, params.cmin, params.cmax) == (
        0.05,
        0.98,
        0.5,
        5,
        2,
        100,
    )


def test_environment_overrides_defaults() -> None:
    params = PolicyParams.from_env({"QUEUEMESH_T1": "0.1", "QUEUEMESH_CMAX": "40", "HOME": "x"})
    assert params.t1 == 0.1
    assert params.cmax == 40


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cmin": 1}, "Cmin"),
        ({"cmax": 1001}, "Cmax"),
        ({"alpha": 2.5}, "whole number"),
        ({"t1": "lots"}, "must be a number"),
        ({"gamma": 3}, "unknown policy parameter"),
        ({"window_s": "inf"}, "finite"),
        ({"t1": "nan"}, "finite"),
        ({"window_s": WINDOW_RETENTION_S + 1}, "window_s must be in"),
        ({"settle_margin_s": 1e9}, "settle_margin_s must be in"),
        ({"stale_after_s": 0}, "stale_after_s must be in"),
        ({"alpha": 1001}, "alpha must be in"),
    ],
)
def test_bad_overrides_say_what_is_wrong(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        PolicyParams().with_overrides(overrides)


def test_the_time_bounds_are_the_evidence_the_controller_keeps() -> None:
    kept = WINDOW_RETENTION_S
    longest = PolicyParams().with_overrides(
        {"window_s": kept, "settle_margin_s": kept, "stale_after_s": kept}
    )
    assert (longest.window_s, longest.settle_margin_s, longest.stale_after_s) == (kept,) * 3
    assert PolicyParams.from_env({"QUEUEMESH_WINDOW_S": str(kept)}).window_s == kept
    with pytest.raises(SettingsError, match="window_s"):
        PolicyParams.from_env({"QUEUEMESH_WINDOW_S": "Infinity"})
