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
from ddcl_theory.ledger.claims import rule_of
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
    base = dict(n_objects=300, trend_objects=(100,), seeds=(0, 1), trend_seeds=1, epochs=30,
                starts=3, temperature_sweep=(0.1, 0.3), relative_temperature=0.1, beside_seeds=1,
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


def test_both_arms_run_from_every_shared_start_at_every_size(tiny_result):
    r = tiny_result
    for seed in (0, 1):
        for arm in od.SHARED:
            assert [x.start for x in r.starts_of(arm, seed)] == [0, 1, 2]
            assert all(x.objective is not None and np.isfinite(x.objective)
                       for x in r.starts_of(arm, seed))
    # smaller catalogues: every start of both arms, on the first trend_seeds seeds only
    small = {(x.method, x.start, x.seed) for x in r.runs if x.n_objects == 100}
    assert small == {(m, i, 0) for m in od.SHARED for i in range(3)}
    assert [x.seed for x in r.best("kmeans", n=100)] == [0]
    # the overlap-free catalogues: k-means alone
    free = {(x.method, x.start) for x in r.runs if not x.overlap}
    assert free == {("kmeans", 0), ("kmeans", 1), ("kmeans", 2)}
    head = r.select("ddcl")[0]
    assert sorted(head.acc_at) == [27, 30] and head.acc_at[30] == head.acc


def test_the_methods_beside_run_on_the_first_beside_seeds_only(tiny_result):
    r = tiny_result
    for method in ("ddcl_sgd", "readout", "gmm"):
        assert [x.seed for x in r.select(method)] == [0]
    assert [x.seed for x in r.select("ddcl", r=0.3)] == [0]
    assert [x.seed for x in r.select("ddcl")] == [0, 1]
    assert all(x.config.startswith("covariance_type=") for x in r.select("gmm"))


def test_shared_starts_are_kmeanspp_draws_of_data_rows_fixed_by_the_seed():
    x = od.standardise(D.generate(200, 0).features)
    a, b = od.shared_starts(x, 4, 3, 5), od.shared_starts(x, 4, 3, 5)
    c = od.shared_starts(x, 4, 3, 6)
    assert a.shape == (3, 4, 5) and np.array_equal(a, b) and not np.array_equal(a, c)
    assert not np.array_equal(a[0], a[1])                  # the starts differ from each other
    rows = {tuple(v) for v in x}
    assert all(tuple(p) in rows for p in a.reshape(-1, 5))  # k-means++ picks data rows
    with pytest.raises(ValueError, match="starts"):
        od.shared_starts(x, 4, 0, 0)


def test_the_head_starts_from_the_shared_start_and_kmeans_from_the_same():
    x = od.standardise(D.generate(300, 1).features)
    start = od.shared_starts(x, 4, 1, 0)[0]
    _, trace = od.fit_ddcl_head(x, 4, 0.1, 3, 0.05, 0, start=start)
    gaps = np.linalg.norm(start[:, None] - start[None], axis=-1)[np.triu_indices(4, 1)]
    assert trace.separation_start["min"] == pytest.approx(gaps.min(), rel=1e-6)
    assert np.isfinite(trace.final_l_q) and trace.final_l_q > 0
    labels, inertia = od.fit_kmeans_from(x, start)
    again = od.fit_kmeans_from(x, start)
    assert np.array_equal(labels, again[0]) and inertia == again[1]
    centres = np.stack([x[labels == j].mean(0) for j in range(4)])
    assert inertia == pytest.approx(((x - centres[labels]) ** 2).sum(), rel=1e-6)
    with pytest.raises(ValueError, match="start"):
        od.fit_ddcl_head(x, 4, 0.1, 1, 0.05, 0, start=start[:3])


def test_own_best_picks_the_lowest_own_objective_never_the_best_accuracy():
    def run(start, acc, objective):
        return od.DebrisRun("kmeans", 0, 10, True, None, start, acc, 0.0, 0.0, None, None, {},
                            objective)

    runs = [run(0, 0.9, 5.0), run(1, 0.6, 3.0), run(2, 0.95, 3.0)]
    assert od.own_best(runs).start == 1                    # lowest objective, earlier start
    with pytest.raises(ValueError, match="objective"):
        od.own_best([run(0, 0.9, None)])


def test_best_returns_one_run_per_seed_of_the_lowest_objective(tiny_result):
    for arm in od.SHARED:
        best = tiny_result.best(arm)
        assert [x.seed for x in best] == [0, 1]
        for x in best:
            assert x.objective == min(y.objective for y in tiny_result.starts_of(arm, x.seed))


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


def test_settle_epoch_and_gmm():
    assert od.settle_epoch(500) == 450 and od.settle_epoch(5) == 4 and od.settle_epoch(1) == 1
    with pytest.raises(ValueError, match="epochs"):
        od.settle_epoch(0)
    x = od.standardise(D.generate(300, 0).features)
    pred, cov = od.fit_gmm(x, 4, 1, 0, ("spherical",))
    assert cov == "spherical" and pred.shape == (300,) and set(pred) <= {0, 1, 2, 3}


def test_settings_reject_bad_trend_sizes_covariances_and_beside_seeds():
    with pytest.raises(ValueError, match="trend_objects"):
        _tiny(trend_objects=(300,))
    with pytest.raises(ValueError, match="trend_objects"):
        _tiny(trend_objects=(200, 100))
    with pytest.raises(ValueError, match="gmm_covariances"):
        _tiny(gmm_covariances=("banana",))
    with pytest.raises(ValueError, match="beside_seeds"):
        _tiny(beside_seeds=3)
    with pytest.raises(ValueError, match="trend_seeds"):
        _tiny(trend_seeds=3)
    with pytest.raises(ValueError, match="n:"):
        _tiny().seeds_at(200)
    with pytest.raises(ValueError, match="seeds"):
        _tiny(seeds=(1, 1))


def test_debris_experiment_is_deterministic(tiny_result):
    again = od.run(_tiny())
    assert [r.acc for r in again.runs] == [r.acc for r in tiny_result.runs]
    assert [r.objective for r in again.runs] == [r.objective for r in tiny_result.runs]


def test_d13_verdict_on_a_tiny_run(tiny_result):
    v = decide_d13(tiny_result)
    assert v.word == "inconclusive" and v.n_seeds == 2          # a pilot: fewer seeds
    assert list(v.trend) == ["100 objects", "300 objects"]
    est, low, high = v.trend["100 objects"]                     # one seed ran there: a point
    assert est == low == high and v.trend["300 objects"][1] < v.trend["300 objects"][2]
    assert [g.name for g in v.gates][0] == "V >= 0" and v.gates[0].passed
    assert len(v.tests) == 3 and all(len(x) == 2 for x in v.per_seed.values())


@pytest.mark.parametrize("fit_variant", ["head", "readout"])
def test_a_killed_ddcl_training_resumes_to_the_same_numbers(tmp_path, monkeypatch, fit_variant):
    x = od.standardise(D.generate(200, 0).features)
    start = od.shared_starts(x, 4, 1, 0)[0]

    def train(run_dir=None):
        if fit_variant == "head":
            return od.fit_ddcl_head(x, 4, 0.1, 12, 0.05, 0, run_dir=run_dir, start=start,
                                    read_at=(10, 12))
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
    a, b = dict(resumed.__dict__), dict(whole.__dict__)
    fa, fb = a.pop("final_l_q"), b.pop("final_l_q")          # NaN for the readout
    assert a == b and (fa == fb or (np.isnan(fa) and np.isnan(fb)))


def test_monotone_share_counts_falls_beyond_rounding_only():
    assert od.is_monotone(np.array([1.0, 1.0, 2.0, 2.0 - 1e-9]))
    assert not od.is_monotone(np.array([1.0, 2.0, 1.9]))
    assert od.nondecreasing_share(np.array([1.0, 2.0, 1.5, 3.0, 2.4])) == pytest.approx(0.5)
    assert od.nondecreasing_share(np.array([1.0, 1.0, 2.0 - 1e-9, 2.0])) == 1.0
    with pytest.raises(ValueError, match="path"):
        od.decreases(np.array([1.0]))


def test_classes_owned_counts_the_classes_that_are_a_clusters_majority():
    y = np.array([0, 0, 0, 0, 1, 1, 2, 3])
    assert od.classes_owned(od.clustering.class_fill(y, np.array([0, 0, 1, 1, 2, 2, 3, 3]),
                                                     4, 4)) == 3   # LEO owns two clusters
    assert od.classes_owned(od.clustering.class_fill(y, np.array([0, 0, 0, 0, 1, 1, 2, 3]),
                                                     4, 4)) == 4


def test_standardise_gives_zero_mean_unit_variance_columns():
    x = np.random.default_rng(0).normal(5, 3, size=(100, 3))
    x[:, 2] = 1.0
    s = od.standardise(x)
    assert np.allclose(s.mean(0), 0) and np.allclose(s[:, :2].std(0), 1) and np.all(s[:, 2] == 0)


def test_profiles_of_the_debris_settings(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    cpu = od.DebrisSettings.from_profile()
    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    reference = od.DebrisSettings.from_profile()
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    paper = od.DebrisSettings.from_profile()
    assert cpu != paper and cpu.epochs == paper.epochs == reference.epochs == 500
    assert cpu.starts == reference.starts                       # the same design
    assert len(cpu.object_scales) >= 2 and len(reference.object_scales) >= 3
    assert len(reference.seeds) == len(paper.seeds) == rule_of("D13").n_seeds
    assert min(reference.seeds) >= 1000 and max(cpu.seeds) < 1000   # fresh confirmatory seeds


def test_decreases_and_largest_drop_measure_falls_below_the_running_maximum():
    path = np.array([1.0, 2.0, 1.5, 3.0, 2.4, 2.4 - 1e-9])
    assert od.decreases(path) == 2                      # the 1e-9 move is rounding
    assert od.largest_drop(path) == pytest.approx(0.6 / 3.0)
    assert od.largest_drop(np.array([0.5, 1.0, 1.0])) == 0.0
