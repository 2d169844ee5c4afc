import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ddcl_theory.ledger.figures import plot_trend, trend_points  # noqa: E402


def test_points_accept_numbers_and_intervals_in_order():
    labels, est, low, high = trend_points({"100 steps": 0.1, "300 steps": [0.2, 0.1, 0.4]})
    assert labels == ["100 steps", "300 steps"]
    np.testing.assert_allclose(est, [0.1, 0.2])
    np.testing.assert_allclose(low, [0.1, 0.1])
    np.testing.assert_allclose(high, [0.1, 0.4])


@pytest.mark.parametrize("trend, match", [({}, "at least one"), ({"a": "x"}, "trend\\['a'\\]"),
                                          ({"a": [0.5, 0.6, 0.7]}, "low <= estimate")])
def test_bad_trends_are_named(trend, match):
    with pytest.raises(ValueError, match=match):
        trend_points(trend)


def test_plot_draws_error_bars_and_the_margin():
    fig, ax = plt.subplots()
    plot_trend(ax, {"1": [0.0, -1.0, 1.0], "2": [1.0, 0.5, 1.5]}, ylabel="diff", margin=0.25)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2"]
    assert any(np.allclose(line.get_ydata(), [0.25, 0.25]) for line in ax.get_lines())
    plt.close(fig)


def test_forest_rows_put_margin_at_zero_and_sesoi_at_one_on_the_claimed_side():
    from ddcl_theory.ledger.figures import forest_position, forest_rows
    assert forest_position(0.05, side=">", margin=0.0, sesoi=0.05) == 1.0
    assert forest_position(-0.05, side="<", margin=0.0, sesoi=-0.05) == 1.0
    assert forest_position(0.0, side="<", margin=0.0, sesoi=-0.05) == 0.0
    test = {"statistic": "gain", "side": ">", "margin": 0.0, "sesoi": 0.02, "estimate": 0.03,
            "interval": [0.01, 0.05], "word": "reproduced", "n_seeds": 10, "seeds_needed": 8}
    own = dict(test, sesoi=0.0)
    ledger = [{"id": "L6", "tests": [test], "exploratory_tests": [own]}, {"id": "D3"}]
    rows = forest_rows(ledger)
    assert [(r["label"], r["phase"]) for r in rows] == [("L6 (1)", "confirmatory"),
                                                       ("L6 (1)", "exploratory")]
    assert (rows[0]["low"], rows[0]["estimate"], rows[0]["high"]) == pytest.approx((0.5, 1.5, 2.5))
    assert rows[1]["high"] == pytest.approx(1.0) and not rows[1]["has_sesoi"]


def test_plot_forest_draws_one_line_per_row_and_refuses_none():
    from ddcl_theory.ledger.figures import plot_forest
    rows = [{"label": "L6 (1)", "phase": "confirmatory", "word": "reproduced", "low": 0.5,
             "estimate": 1.0, "high": 1.5, "has_sesoi": True}]
    fig, ax = plt.subplots()
    plot_forest(ax, rows)
    assert len(ax.get_yticks()) == 1
    with pytest.raises(ValueError, match="at least one"):
        plot_forest(ax, [])
    plt.close(fig)


def test_plot_forest_cuts_far_intervals_at_its_window_and_points_the_estimate_away():
    from ddcl_theory.ledger.figures import FOREST_LIMITS, plot_forest
    fig, ax = plt.subplots()
    rows = [{"label": "far", "phase": "confirmatory", "low": 100.0, "estimate": 130.0,
             "high": 160.0, "word": "reproduced", "has_sesoi": True}]
    plot_forest(ax, rows)
    line, marker = ax.lines[:2]
    assert list(line.get_xdata()) == [FOREST_LIMITS[1]] * 2
    assert marker.get_marker() == ">" and marker.get_xdata()[0] == FOREST_LIMITS[1]
    assert ax.get_xlim()[1] < 10
    plt.close(fig)
