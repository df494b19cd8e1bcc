"""hypothesis strategies shared by the decoder and handler properties."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from controller.model import GroupReport, GroupShare

# Any JSON-shaped value, NaN and infinities included (what a hostile or broken producer sends).
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def announced_fields(draw: st.DrawFn, throttled: int) -> dict[str, Any]:
    """A Sample's announced-limit fields as a worker would report them: a limit or none (its
    quota, window and reset each known or not), and the 429s by kind among ``throttled``."""
    fields: dict[str, Any] = {}
    if draw(st.booleans()):
        amount = st.integers(0, 10**7).map(float) | st.floats(0, 1e9, allow_nan=False)
        fields["quota_remaining"] = draw(amount)
        for name in ("quota_limit", "quota_window_s", "quota_reset_s"):
            fields[name] = draw(st.none() | amount)
    concurrency = draw(st.integers(0, throttled))
    fields["throttled_concurrency"] = concurrency
    fields["throttled_rate"] = draw(st.integers(0, throttled - concurrency))
    return fields


rates = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)
group_shares = st.builds(
    GroupShare,
    queue=st.from_regex(r"[A-Za-z0-9_-]{1,80}", fullmatch=True),
    share_rps=rates,
    level=st.integers(0, 1000),
    paused=st.booleans(),
)
# What a batch may decide for a group: any name, a capacity known or not, any members.
group_reports = st.builds(
    GroupReport,
    group=st.text(min_size=1, max_size=40).filter(str.strip),
    at=st.floats(0, 4e9, allow_nan=False),
    capacity_rps=st.none() | rates,
    members=st.lists(group_shares, max_size=6).map(tuple),
)
