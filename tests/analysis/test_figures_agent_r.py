"""Agent-R's figure (kit.studies.agent_r.figures): the per-policy statistics it draws, on hand-made rows."""

import numpy as np
import pandas as pd
import pytest

from kit.studies.agent_r.figures import PANELS, bootstrap_ratio, figure_agent_r, policy_curves


def _rows():
    out = []
    for policy, it, correct in (("cold_start", 0, [1, 0, 0, 0]), ("agent_r", 1, [1, 1, 0, 0]), ("agent_r", 2, [1, 1, 1, 0]),
                                ("good_only", 2, [0, 0, 0, 0])):
        for j, c in enumerate(correct):
            out.append({"policy": policy, "iteration": it, "problem": f"p{j % 2}", "correct": c,
                        "failed_call": int(j >= 2), "reflection": j, "high": 4, "tool_calls": 1, "tokens": 50})
    return pd.DataFrame(out)


def test_ratio_of_sums_with_an_interval_over_problems():
    df = pd.DataFrame({"problem": ["a", "a", "b", "b"], "x": [1, 3, 0, 0], "d": [4, 4, 2, 2]})
    stat, lo, hi, n = bootstrap_ratio(df, "x", "d")
    assert stat == pytest.approx(4 / 12) and n == 4
    assert 0.0 <= lo <= stat <= hi <= 0.5  # resamples of {a: 4/8, b: 0/4}: 0, 1/3 or 1/2
    assert np.isnan(bootstrap_ratio(df.iloc[:0], "x", None)[0])


def test_curves_put_the_cold_start_at_iteration_zero_of_both_arms_and_filter_recovery():
    c = policy_curves(_rows())
    acc = c[c["panel"] == PANELS[0][0]].set_index(["arm", "iteration"])["stat"]
    assert acc[("agent_r", 0)] == acc[("good_only", 0)] == 0.25
    assert acc[("agent_r", 2)] == 0.75 and acc[("good_only", 2)] == 0.0
    rec = c[c["panel"] == PANELS[1][0]].set_index(["arm", "iteration"])["stat"]
    assert rec[("agent_r", 2)] == 0.5  # of the two rows with a failed call (j = 2, 3), one is correct
    refl = c[c["panel"] == PANELS[3][0]].set_index(["arm", "iteration"])["stat"]
    assert refl[("agent_r", 1)] == pytest.approx(6 / 16)


def test_a_missing_column_is_named():
    with pytest.raises(KeyError, match="high"):
        policy_curves(_rows().drop(columns=["high"]))


def test_the_figure_has_four_panels():
    fig = figure_agent_r(_rows())
    assert len(fig.axes) == 4 and all(ax.has_data() for ax in fig.axes)


def test_with_probes_panel_b_is_recovery_after_the_same_forced_failure():
    """Issue #46 review: the primary claim's measure is drawn; panel (b) reads the probe rows."""
    from kit.studies.agent_r.figures import PROBE_PANEL

    probes = pd.DataFrame([{"policy": p, "iteration": it, "problem": f"p{j}", "correct": c}
                           for p, it, cs in (("cold_start", 0, [1, 1, 0, 0]), ("agent_r", 1, [1, 0, 0, 0]),
                                             ("good_only", 1, [1, 1, 1, 0])) for j, c in enumerate(cs)])
    c = policy_curves(_rows(), probes)
    rec = c[c["panel"] == PROBE_PANEL[0]].set_index(["arm", "iteration"])["stat"]
    assert rec[("agent_r", 0)] == 0.5 and rec[("agent_r", 1)] == 0.25 and rec[("good_only", 1)] == 0.75
    assert PANELS[1][0] not in set(c["panel"])
    fig = figure_agent_r(_rows(), probes=probes)
    assert fig.axes[1].get_title() == PROBE_PANEL[0] and len(fig.legends) == 1 and not fig.axes[0].get_legend()
