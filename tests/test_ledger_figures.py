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
