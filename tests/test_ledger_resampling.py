"""ddcl_theory.ledger.resampling: the bootstrap of a crossed seeds x shared-items design."""
from __future__ import annotations

import numpy as np
import pytest

from ddcl_theory.ledger import stats
from ddcl_theory.ledger.resampling import CROSSED, bootstrap_crossed


def _crossed(rng, n_seeds, n_items, *, mean=0.0, seed_sd=0.0, item_sd=0.0, noise_sd=0.0):
    """values = mean + seed effect + item effect (shared by every seed) + noise."""
    return (mean + seed_sd * rng.standard_normal((n_seeds, 1))
            + item_sd * rng.standard_normal((1, n_items))
            + noise_sd * rng.standard_normal((n_seeds, n_items)))


def test_estimate_is_the_grand_mean_and_the_interval_holds_it():
    values = _crossed(np.random.default_rng(0), 8, 50, mean=0.3, seed_sd=0.1, item_sd=0.2)
    iv = bootstrap_crossed(values, n_resamples=999)
    assert iv.estimate == pytest.approx(values.mean())
    assert iv.low < iv.estimate < iv.high and iv.n == 8 and iv.method == CROSSED
    assert CROSSED in stats.METHODS


def test_reproducible_through_its_seed():
    values = _crossed(np.random.default_rng(1), 6, 40, seed_sd=1.0, item_sd=1.0)
    a, b = (bootstrap_crossed(values, n_resamples=500, seed=3) for _ in range(2))
    assert a == b
    assert bootstrap_crossed(values, n_resamples=500, seed=4) != a


def test_a_shared_item_effect_widens_the_interval_and_more_seeds_do_not_remove_it():
    rng = np.random.default_rng(2)
    items = 0.5 * rng.standard_normal((1, 100))           # the same pool for every seed
    widths = {}
    for n_seeds in (10, 80):
        seeds = 0.05 * rng.standard_normal((n_seeds, 1))
        iv = bootstrap_crossed(seeds + items, n_resamples=2000)
        t = stats.one_sample_t((seeds + items).mean(axis=1))
        widths[n_seeds] = iv.high - iv.low
        assert iv.high - iv.low > 2 * (t.high - t.low)     # seeds alone miss the pool
    # the pool's share (about 2 x 1.96 x 0.5 / sqrt(100) = 0.2) stays with 8x the seeds
    assert widths[80] == pytest.approx(widths[10], rel=0.25)
    assert widths[80] > 0.15


def test_without_item_variation_it_is_a_bootstrap_over_seeds():
    rng = np.random.default_rng(3)
    seeds = rng.standard_normal(30)
    values = np.repeat(seeds[:, None], 20, axis=1)
    iv = bootstrap_crossed(values, n_resamples=4000)
    ref = stats.bootstrap(seeds, n_resamples=4000, method="percentile")
    assert iv.low == pytest.approx(ref.low, abs=0.08) and iv.high == pytest.approx(ref.high,
                                                                                   abs=0.08)


def test_covers_the_true_mean_of_a_crossed_design_about_95_percent_of_the_time():
    rng = np.random.default_rng(4)
    hits = 0
    trials = 200
    for k in range(trials):
        v = _crossed(rng, 12, 60, mean=1.0, seed_sd=0.3, item_sd=0.3, noise_sd=0.5)
        iv = bootstrap_crossed(v, n_resamples=400, seed=k)
        hits += iv.low <= 1.0 <= iv.high
    assert hits / trials >= 0.88                           # the crossed bootstrap errs wide


@pytest.mark.parametrize("values, kwargs, match", [
    (np.zeros(5), {}, "shape"),
    (np.zeros((1, 5)), {}, "seeds >= 2"),
    (np.zeros((3, 0)), {}, "items >= 1"),
    (np.array([[0.0, np.nan], [1.0, 2.0]]), {}, "finite"),
    (np.zeros((3, 4)), {"confidence": 1.0}, "confidence"),
    (np.zeros((3, 4)), {"n_resamples": 10}, "n_resamples"),
    (np.zeros((3, 4)), {"batch": 0}, "batch"),
])
def test_bad_input_names_the_argument(values, kwargs, match):
    with pytest.raises(ValueError, match=match):
        bootstrap_crossed(values, **kwargs)
