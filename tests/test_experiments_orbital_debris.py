"""The synthetic orbital-debris catalogue (claim D13): class boundaries, Kepler's third law,
determinism, exact class sizes; and the debris experiment on a tiny catalogue."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddcl_theory.data import debris as D
from ddcl_theory.experiments import orbital_debris as od
from ddcl_theory.ledger.decisions.orbital_debris import decide_d13
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir

LEO, MEO, GEO, HEO = range(4)


@pytest.fixture(scope="module")
def catalogue():
    return D.generate(3000, seed=7)


def test_true_elements_respect_the_class_boundaries(catalogue):
    c = catalogue
    y, hp, ha, e = c.labels, c.perigee_alt, c.apogee_alt, c.eccentricity
    assert np.all(ha[y == LEO] < D.LEO_APOGEE_MAX)
    assert np.all(e[y == HEO] > D.HEO_E_MIN)
    geo_band = lambda h: np.abs(h - D.GEO_ALTITUDE) <= D.GEO_HALF_WIDTH
    assert np.all(geo_band(hp[y == GEO]) & geo_band(ha[y == GEO]))
    meo = y == MEO
    assert np.all((e[meo] <= D.HEO_E_MIN) & (ha[meo] >= D.LEO_APOGEE_MAX)
                  & ~(geo_band(hp[meo]) & geo_band(ha[meo])))
    assert np.all(hp >= 150.0) and np.all(hp <= ha)
    assert np.array_equal(D.classify(hp, ha), y)


@settings(max_examples=200, deadline=None)
@given(st.floats(100, 60000), st.floats(0, 60000))
def test_classify_is_a_partition_by_the_stated_rules(hp, extra):
    ha = hp + extra
    label = int(D.classify(np.array([hp]), np.array([ha]))[0])
    a = D.R_EARTH + (hp + ha) / 2
    e = (ha - hp) / (2 * a)
    in_band = abs(hp - 35786) <= 200 and abs(ha - 35786) <= 200
    expected = HEO if e > 0.25 else LEO if ha < 2000 else GEO if in_band else MEO
    assert label == expected


def test_period_follows_keplers_third_law(catalogue):
    c = catalogue
    expected = 2 * math.pi * np.sqrt(c.semi_major_axis ** 3 / 398600.4418) / 60
    assert np.allclose(c.period, expected, rtol=1e-12)
    # observed columns: the period recomputed from the noisy apsides obeys the same law
    hp, ha, e, _, period = c.features.T
    a_obs = D.R_EARTH + (hp + ha) / 2
    assert np.allclose(period, 2 * math.pi * np.sqrt(a_obs ** 3 / D.MU_EARTH) / 60, rtol=1e-12)
    assert np.allclose(e, (ha - hp) / (2 * a_obs), rtol=1e-9, atol=1e-15)


def test_known_orbits_have_their_textbook_periods_and_inclinations():
    # geostationary radius: one sidereal day (1436.07 min)
    assert float(D.kepler_period(D.R_EARTH + D.GEO_ALTITUDE)) == pytest.approx(1436.07, abs=0.1)
    assert float(D.kepler_period(D.R_EARTH + 400.0)) == pytest.approx(92.56, abs=0.05)   # ISS
    assert float(D.kepler_period(26560.0)) == pytest.approx(718.0, abs=1.0)   # GPS: half a day
    assert float(D.sso_inclination(D.R_EARTH + 800.0)) == pytest.approx(98.6, abs=0.1)
    a, e = D.elements_from_apsides(np.array([500.0]), np.array([39500.0]))
    assert float(a[0]) == pytest.approx(D.R_EARTH + 20000.0)
    assert float(e[0]) == pytest.approx(39000.0 / (2 * (D.R_EARTH + 20000.0)))


def test_catalogue_is_deterministic_by_seed():
    a, b, c = D.generate(500, seed=3), D.generate(500, seed=3), D.generate(500, seed=4)
    assert np.array_equal(a.features, b.features) and np.array_equal(a.labels, b.labels)
    assert np.array_equal(a.population, b.population)
    assert not np.array_equal(a.features, c.features)


def test_class_sizes_are_exact_and_leo_dominates(catalogue):
    assert catalogue.class_sizes.tolist() == [2100, 240, 360, 300]
    sizes = D.generate(1001, seed=0, shares=(0.5, 0.2, 0.2, 0.1)).class_sizes
    assert sizes.sum() == 1001 and sizes.tolist() == [501, 200, 200, 100]


def test_noise_blurs_the_observed_columns_but_not_the_labels(catalogue):
    c = catalogue
    quiet = D.generate(3000, seed=7, sigma_r=0.0, sigma_i=0.0)
    assert np.array_equal(quiet.labels, c.labels)
    assert np.allclose(quiet.features[:, 0], quiet.perigee_alt)
    assert np.allclose(quiet.features[:, 3], quiet.inclination)
    # with noise some objects look like another class by the rules: overlap, not trivial
    looks = D.classify(c.features[:, 0], c.features[:, 1])
    mismatch = float(np.mean(looks != c.labels))
    assert 0.01 < mismatch < 0.3


def test_without_overlap_no_boundary_population_is_drawn():
    c = D.generate(2000, seed=1, overlap=False)
    assert not any("eccentric" in p or "near-GEO" in p for p in c.population)
    assert any("eccentric" in p for p in D.generate(2000, seed=1).population)


def test_generator_rejects_bad_arguments():
    with pytest.raises(ValueError, match="n:"):
        D.generate(3)
    with pytest.raises(ValueError, match="seed"):
        D.generate(100, seed=-1)
    with pytest.raises(ValueError, match="shares"):
        D.generate(100, shares=(0.5, 0.5, 0.0, 0.0))
    with pytest.raises(ValueError, match="sigma_r"):
        D.generate(100, sigma_r=-0.1)
    with pytest.raises(ValueError, match="perigee"):
        D.elements_from_apsides(np.array([900.0]), np.array([800.0]))


# ----------------------------------------------------------------------------- the experiment
def _tiny(**kw):
    base = dict(n_objects=300, trend_objects=(100,), seeds=(0, 1), epochs=30,
                temperature_sweep=(0.1,), relative_temperature=0.1, kmeans_restarts=2,
                readout_hidden=8, gmm_covariances=("full", "diag"))
    base.update(kw)
    return od.DebrisSettings(**base)


@pytest.fixture(scope="module")
def tiny_result():
    return od.run(_tiny())


def test_debris_experiment_checks_v_and_the_decomposition_every_epoch(tiny_result):
    traced = [r for r in tiny_result.runs if r.trace is not None]
    assert {r.method for r in traced} == {"ddcl", "ddcl_sgd", "readout"}
    for r in traced:
        assert len(r.trace.v) == len(r.trace.loss) == 30 and r.trace.min_v >= 0
        assert max(r.trace.identity_error) < 1e-3
        assert r.trace.separation_path("min").shape == (31,)
        assert r.trace.convergence.window == 3
    for r in tiny_result.runs:
        assert 0 < r.acc <= 1 and r.fill.true_sizes.sum() == r.n_objects
        assert r.fill.cluster_sizes.sum() == r.n_objects


def test_debris_experiment_runs_the_deciding_pair_and_peers_at_every_size(tiny_result):
    by_size = {n: {r.method for r in tiny_result.runs if r.n_objects == n and r.overlap}
               for n in (100, 300)}
    assert by_size[100] == {"ddcl", "kmeans1", "kmeans", "gmm"}
    assert by_size[300] == set(od.METHODS)
    assert not any(r.n_objects == 100 and not r.overlap for r in tiny_result.runs)
    for n in (100, 300):
        assert [r.seed for r in tiny_result.select("ddcl", n=n)] == [0, 1]
        assert [r.seed for r in tiny_result.select("kmeans1", n=n)] == [0, 1]
    head = tiny_result.select("ddcl")[0]
    assert sorted(head.acc_at) == [1, 6, 30] and head.acc_at[30] == head.acc
    assert all(r.config == "n_init=1" for r in tiny_result.select("kmeans1"))
    assert all(r.config.startswith("covariance_type=") and r.config.endswith("n_init=1")
               for r in tiny_result.select("gmm"))


def test_the_head_and_readout_take_the_threshold_of_the_loss_they_train(monkeypatch):
    seen = []
    real = od.critical_temperature

    def spy(z, objective="free_energy"):
        seen.append(objective)
        return real(z, objective=objective)

    monkeypatch.setattr(od, "critical_temperature", spy)
    x = od.standardise(D.generate(100, 0).features)
    od.fit_ddcl_head(x, 4, 0.1, 2, 0.05, 0)
    od.fit_ddcl_readout(x, 4, 0.1, 2, 0.01, 8, 4, 0.25, 0)
    assert seen == ["quantisation", "quantisation"]


def test_checkpoint_epochs_and_gmm():
    assert od.checkpoint_epochs(500) == (20, 100, 500)
    assert od.checkpoint_epochs(5) == (1, 5)
    with pytest.raises(ValueError, match="epochs"):
        od.checkpoint_epochs(0)
    x = od.standardise(D.generate(300, 0).features)
    pred, cov = od.fit_gmm(x, 4, 1, 0, ("spherical",))
    assert cov == "spherical" and pred.shape == (300,) and set(pred) <= {0, 1, 2, 3}


def test_settings_reject_bad_trend_sizes_and_covariances():
    with pytest.raises(ValueError, match="trend_objects"):
        _tiny(trend_objects=(300,))
    with pytest.raises(ValueError, match="trend_objects"):
        _tiny(trend_objects=(200, 100))
    with pytest.raises(ValueError, match="gmm_covariances"):
        _tiny(gmm_covariances=("banana",))


def test_debris_experiment_is_deterministic(tiny_result):
    again = od.run(_tiny())
    assert [r.acc for r in again.runs] == [r.acc for r in tiny_result.runs]


def test_d13_verdict_on_a_tiny_run(tiny_result):
    v = decide_d13(tiny_result, od.variant_parts(tiny_result, "ddcl"))
    assert v.word == "inconclusive" and v.n_seeds == 2 and v.numbers["v_ok"]
    assert list(v.trend) == ["100 objects", "300 objects"]
    assert "monotone in" in v.evidence


@pytest.mark.parametrize("fit_variant", ["head", "readout"])
def test_a_killed_ddcl_training_resumes_to_the_same_numbers(tmp_path, monkeypatch, fit_variant):
    x = od.standardise(D.generate(200, 0).features)

    def train(run_dir=None):
        if fit_variant == "head":
            return od.fit_ddcl_head(x, 4, 0.1, 12, 0.05, 0, run_dir=run_dir)
        return od.fit_ddcl_readout(x, 4, 0.1, 12, 0.01, 8, 4, 0.25, 0, run_dir=run_dir)

    whole_pred, whole = train()
    monkeypatch.setattr(od, "CHECKPOINT_EVERY", 4)
    real_fit = od.fit

    def killed_fit(*args, end_of_round, **kw):
        def end(r):
            out = end_of_round(r)
            if r == 9:
                raise KeyboardInterrupt                 # killed after the save at epoch 8
            return out
        return real_fit(*args, end_of_round=end, **kw)

    settings = _tiny()
    monkeypatch.setattr(od, "fit", killed_fit)
    with pytest.raises(KeyboardInterrupt):
        train(RunDir("orbital_debris", settings, root=tmp_path, enabled=True))
    monkeypatch.setattr(od, "fit", real_fit)
    pred, resumed = train(RunDir("orbital_debris", settings, root=tmp_path, enabled=True))
    assert np.array_equal(pred, whole_pred)
    assert resumed.__dict__ == whole.__dict__


def test_monotone_check_tolerates_rounding_only():
    assert od.is_monotone(np.array([1.0, 1.0, 2.0, 2.0 - 1e-9]))
    assert not od.is_monotone(np.array([1.0, 2.0, 1.9]))


def test_standardise_gives_zero_mean_unit_variance_columns():
    x = np.random.default_rng(0).normal(5, 3, size=(100, 3))
    x[:, 2] = 1.0
    s = od.standardise(x)
    assert np.allclose(s.mean(0), 0) and np.allclose(s[:, :2].std(0), 1) and np.all(s[:, 2] == 0)


def test_paper_profile_changes_the_debris_settings(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    cpu = od.DebrisSettings.from_profile()
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    reference = od.DebrisSettings.from_profile()
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    paper = od.DebrisSettings.from_profile()
    assert cpu != paper and cpu.epochs == paper.epochs == reference.epochs == 500
    assert len(cpu.seeds) >= 5 and cpu.object_scales == (3000,)
    assert len(reference.seeds) == len(paper.seeds) == 10        # the D13 rule's seeds
    assert len(reference.object_scales) >= 3 and len(paper.object_scales) >= 3


def test_decreases_and_largest_drop_measure_falls_below_the_running_maximum():
    path = np.array([1.0, 2.0, 1.5, 3.0, 2.4, 2.4 - 1e-9])
    assert od.decreases(path) == 2                      # the 1e-9 move is rounding
    assert od.largest_drop(path) == pytest.approx(0.6 / 3.0)
    assert od.largest_drop(np.array([0.5, 1.0, 1.0])) == 0.0
