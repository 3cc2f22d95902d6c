"""`guard.window.Rolling` agrees with recomputing the window from scratch."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_costguard.guard.window import Rolling

KEYS = ("a", "b", ("k", "1"), ("k", "2"))

points = st.lists(
    st.tuples(
        st.floats(min_value=0.0, max_value=30.0),  # time step
        st.dictionaries(st.sampled_from(KEYS), st.floats(min_value=-1e6, max_value=1e6),
                        max_size=4),
        st.dictionaries(st.sampled_from(KEYS), st.floats(min_value=-1e6, max_value=1e6),
                        max_size=4),
    ),
    max_size=300,
)


@settings(max_examples=200, deadline=None)
@given(points, st.floats(min_value=0.0, max_value=200.0))
def test_sums_and_maxima_match_a_full_recount(steps, span):
    window = Rolling(span)
    kept: list[tuple[float, dict, dict]] = []
    t = 0.0
    for step, sums, maxima in steps:
        t += step
        window.add(t, sums, maxima)
        kept.append((t, sums, maxima))
        inside = [p for p in kept if p[0] >= t - span]
        assert len(window) == len(inside)
        for key in KEYS:
            values = [p[1][key] for p in inside if key in p[1]]
            assert math.isclose(window.sum(key), math.fsum(values), rel_tol=1e-9, abs_tol=1e-3)
            peaks = [p[2][key] for p in inside if key in p[2]]
            assert window.max(key, default=-math.inf) == (max(peaks) if peaks else -math.inf)
        assert set(window.keys()) == {k for p in inside for k in p[1]}


def test_a_key_leaves_with_its_last_point_and_sums_come_back_exact():
    window = Rolling(10.0)
    window.add(0.0, {"held": 0.1, ("busy", "k1"): 1.0})
    for i in range(1, 200):
        window.add(float(i) * 0.5, {"held": 0.1})
    # k1's only point left long ago: no residue of it remains
    assert ("busy", "k1") not in set(window.keys())
    assert window.sum(("busy", "k1")) == 0.0
    # many subtractions later, the sum is still what adding the kept points gives
    assert window.sum("held") == math.fsum([0.1] * len(window))
    window.add(1000.0, {})
    assert window.sum("held") == 0.0 and list(window.keys()) == []
    assert window.max("anything") == 0.0
