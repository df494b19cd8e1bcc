from __future__ import annotations

import pytest

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
    ],
)
def test_bad_overrides_say_what_is_wrong(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        PolicyParams().with_overrides(overrides)
