"""The wake-up's delay: whole seconds, never early, none past SQS's limit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controller.constants import WAKE_UP_MAX_DELAY_S
from controller.wakeups import delay_s


@given(
    now=st.floats(min_value=0, max_value=2e9, allow_nan=False),
    ahead=st.floats(min_value=-100, max_value=WAKE_UP_MAX_DELAY_S, allow_nan=False),
)
def test_a_wake_up_is_never_delivered_early(now: float, ahead: float) -> None:
    wait = delay_s(now + ahead, now)
    assert wait is not None and 0 <= wait <= WAKE_UP_MAX_DELAY_S
    assert now + wait >= now + ahead


def test_a_wake_up_past_the_longest_delay_is_left_to_the_tick() -> None:
    assert delay_s(1000.0 + WAKE_UP_MAX_DELAY_S + 0.5, 1000.0) is None
    assert delay_s(1000.0 + WAKE_UP_MAX_DELAY_S, 1000.0) == WAKE_UP_MAX_DELAY_S
    assert delay_s(1000.2, 1000.0) == 1
    assert delay_s(990.0, 1000.0) == 0
