"""hypothesis strategies shared by the decoder and handler properties."""

from __future__ import annotations

from hypothesis import strategies as st

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
