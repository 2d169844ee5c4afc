"""Readouts of frozen tokens (ddcl_theory.layers.readouts) and the text-readout experiment (claim D14)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from _text_fakes import FakeEncoder

from ddcl_theory.experiments import probes as P
from ddcl_theory.experiments import text_readout as T
from ddcl_theory.layers import readouts as R
from ddcl_theory.metrics.clustering import clustering_acc, purity
from ddcl_theory.runtime import profile


def _packed(lengths, dim=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.as_tensor(lengths)
    values = torch.randn(int(lengths.sum()), dim, generator=gen)
    return R.PackedTokens(values, torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]))


def test_packed_readout_pooled_equals_the_layer_pooled_on_the_padded_batch():
    torch.manual_seed(1)
    model = R.DDCLPooledReadout(12, 3, 5, heads=2, head_dim=4, temperature=0.7)
    x = torch.randn(4, 9, 12)
    mask = torch.rand(4, 9) > 0.4
    mask[:, 0] = True
    packed = R.PackedTokens.from_padded(x, mask)
    tokens, seg = packed.batch(torch.arange(4))
    pooled, out = model.pooled(tokens, seg, 4)
    reference = model.ddcl(x, mask)
    torch.testing.assert_close(pooled, reference.pooled, rtol=1e-5, atol=1e-5)
    for name in ("l_q", "l_ols", "v"):
        torch.testing.assert_close(getattr(out.losses, name), getattr(reference.losses, name),
                                   rtol=1e-5, atol=1e-6)


def test_packed_batch_gathers_the_tokens_of_the_chosen_sequences_in_order():
    data = _packed([3, 1, 4, 2])
    tokens, seg = data.batch(torch.tensor([2, 0]))
    torch.testing.assert_close(tokens, torch.cat([data.values[4:8], data.values[0:3]]))
    assert seg.tolist() == [0, 0, 0, 0, 1, 1, 1]
    with pytest.raises(ValueError, match="offsets"):
        R.PackedTokens(torch.zeros(3, 2), torch.tensor([0, 2, 2, 3]))


def test_segment_mean_and_masked_mean_agree():
    x = torch.randn(3, 5, 4, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    packed = R.PackedTokens.from_padded(x, mask)
    seg = torch.repeat_interleave(torch.arange(3), packed.lengths)
    expected = R.masked_mean(x, mask).float()
    torch.testing.assert_close(R.segment_mean(packed.values, seg, 3), expected)
    torch.testing.assert_close(R.first_token(x, mask), x[:, 0])


def test_lloyd_never_increases_the_kmeans_objective_and_finds_the_blobs():
    gen = torch.Generator().manual_seed(0)
    blobs = torch.cat([torch.randn(200, 2, generator=gen) + torch.tensor([4.0, 0.0]),
                       torch.randn(200, 2, generator=gen) - torch.tensor([4.0, 0.0]),
                       torch.tensor([[0.0, 60.0]])])                    # one far outlier

    def sse(c):
        return float(torch.cdist(blobs, c).min(1).values.pow(2).sum())

    seeds = torch.tensor([[3.0, 1.0], [4.0, -1.0]])                    # both in the right blob
    previous = sse(seeds)
    for steps in (1, 2, 5, 20):
        now = sse(R.lloyd(blobs, seeds, steps))
        assert now <= previous + 1e-9
        previous = now
    out = R.lloyd(blobs, seeds, 20)
    assert sorted(round(float(v)) for v in out[:, 0]) == [-4, 4]
    # a seed that owns only the outlier stays with it (Lloyd is a local method)
    stuck = R.lloyd(blobs, torch.tensor([[0.0, 60.0], [3.0, 0.0]]), 20)
    assert float(stuck[0, 1]) == 60.0


def test_ddcl_probe_learns_a_token_level_signal():
    # class 1 sequences contain a marker direction on some tokens; the mean is diluted by noise
    gen = torch.Generator().manual_seed(0)
    n, t, d = 240, 12, 16
    x = torch.randn(n, t, d, generator=gen)
    y = torch.arange(n) % 2
    x[y == 1, :3, 0] += 4.0
    mask = torch.ones(n, t, dtype=torch.bool)
    tr, te = torch.arange(0, 160), torch.arange(160, 240)
    train = R.PackedTokens.from_padded(x[tr], mask[tr])
    test = R.PackedTokens.from_padded(x[te], mask[te])
    cfg = P.TrainConfig(epochs=15, batch_size=32, lr=5e-3)
    log = P.ddcl_probe(train, y[tr], test, y[te], num_prototypes=4, config=cfg, seed=0,
                       head_dim=8)
    assert log.test_acc > 0.9 and log.train_acc > 0.9
    assert min(log.v) >= 0 and len(log.v) == 15 * 5
    assert max(abs(a - b - v) / a for a, b, v in zip(log.l_q, log.l_ols, log.v)) < 1e-4
    assert 0 < log.fraction_used <= 1


def test_linear_probe_separates_linearly_separable_features():
    gen = torch.Generator().manual_seed(0)
    f = torch.randn(200, 5, generator=gen)
    y = (f[:, 0] + 0.5 * f[:, 1] > 0).long()
    log = P.linear_probe(f[:150], y[:150], f[150:], y[150:])
    assert log.test_acc > 0.9


def test_kmeans_and_ddcl_clusters_recover_separated_blobs():
    gen = torch.Generator().manual_seed(0)
    centres = torch.tensor([[6.0, 0.0, 0.0], [-6.0, 0.0, 0.0], [0.0, 6.0, 0.0]])
    y = torch.arange(150) % 3
    docs = centres[y] + torch.randn(150, 3, generator=gen)
    assert clustering_acc(y, P.kmeans_clusters(docs, 3, seed=0)) > 0.95
    one_each = R.PackedTokens(docs, torch.arange(151))
    clusters = P.ddcl_clusters(one_each, 3, seed=0, steps=30)
    assert clustering_acc(y, clusters.labels) > 0.95 and min(clusters.v) >= 0
    # token level: each sequence has 6 tokens, 4 from its own blob and 2 from a shared one
    tokens = torch.cat([centres[y].repeat_interleave(4, 0), centres[[2]].repeat(300, 1)])
    order = torch.cat([torch.arange(150)[:, None] * 4 + torch.arange(4),
                       600 + torch.arange(150)[:, None] * 2 + torch.arange(2)], 1).reshape(-1)
    tokens = tokens[order] + 0.3 * torch.randn(900, 3, generator=gen)
    seqs = R.PackedTokens(tokens, torch.arange(0, 901, 6))
    labels = P.ddcl_clusters(seqs, 3, seed=0, steps=30).labels
    assert clustering_acc(y, labels) > 0.95      # the over-use rule, not the majority


def test_purity_is_many_to_one_accuracy():
    y = np.array([0, 0, 1, 1, 1, 0])
    assert purity(y, np.array([0, 0, 1, 1, 1, 0])) == 1.0
    assert purity(y, np.array([0, 1, 2, 3, 4, 5])) == 1.0      # singletons are pure
    assert clustering_acc(y, np.array([0, 1, 2, 3, 4, 5])) == pytest.approx(2 / 6)
    assert purity(y, np.zeros(6, dtype=int)) == 0.5
    with pytest.raises(ValueError, match="y_true"):
        purity(y, y[:3])


def test_balanced_draw_is_balanced_sorted_and_skips_unusable_rows():
    labels = np.repeat([0, 1, 2], [50, 30, 5])
    gen = torch.Generator().manual_seed(0)
    idx = T.balanced_draw(labels, 30, gen, usable=lambda i: i % 7 != 0)
    assert len(idx) == 30 and np.all(np.diff(idx) > 0) and not np.any(idx % 7 == 0)
    counts = np.bincount(labels[idx], minlength=3)
    assert counts[2] == len([i for i in range(80, 85) if i % 7]) and counts[0] >= 10
    assert T.balanced_draw(labels, 0, gen).tolist() == list(range(85))


def test_validation_split_is_stratified_disjoint_and_seeded():
    y = np.repeat([0, 1, 2], [40, 30, 30])
    a, b = P.validation_split(y, 0.2, seed=3)
    assert len(b) == 20 and set(a).isdisjoint(b) and len(a) + len(b) == 100
    assert np.bincount(y[b]).tolist() == [8, 6, 6]
    assert np.array_equal(P.validation_split(y, 0.2, seed=3)[1], b)
    assert not np.array_equal(P.validation_split(y, 0.2, seed=4)[1], b)


def _token_task(n=240, t=10, d=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, t, d, generator=gen)
    y = torch.arange(n) % 2
    x[y == 1, :3, 0] += 4.0
    flip = torch.rand(n, generator=gen) < 0.1                   # label noise: CE stays > 0
    y = torch.where(flip, 1 - y, y)
    mask = torch.ones(n, t, dtype=torch.bool)
    return x, y, mask


def test_ddcl_readout_fit_learns_stops_and_sets_tau_from_the_quantisation_tc():
    x, y, mask = _token_task()
    parts = [torch.arange(0, 128), torch.arange(128, 160), torch.arange(160, 240)]
    tr, va, te = (R.PackedTokens.from_padded(x[i], mask[i]) for i in parts)
    cfg = dataclasses.replace(T.DDCL_READOUT, head_dim=8, max_epochs=40, batch_size=32,
                              lr=1e-2, init_sequences=64)
    run = P.ddcl_readout_fit(tr, y[parts[0]], va, y[parts[1]], te, y[parts[2]],
                             num_prototypes=2, config=cfg, seed=0)
    assert run.finished and run.stopped in ("plateau", "passed optimum")
    assert run.epochs >= cfg.min_epochs and len(run.val_loss) == run.epochs
    assert run.best_epoch == int(np.argmin(run.val_loss)) + 1
    assert run.test_correct.shape == (80,) and run.selected_test_acc > 0.75
    assert run.val.loss[0] == min(run.val_loss)
    assert run.tau == pytest.approx(cfg.relative_temperature * run.t_c) and run.t_c_end > 0
    assert min(run.v) >= 0
    assert max(abs(a - b - v) / a for a, b, v in zip(run.l_q, run.l_ols, run.v)) < 1e-4
    again = P.ddcl_readout_fit(tr, y[parts[0]], va, y[parts[1]], te, y[parts[2]],
                               num_prototypes=2, config=cfg, seed=0)
    assert again.val_loss == run.val_loss                  # seeded
    assert np.array_equal(again.test_correct, run.test_correct)


def test_the_reported_readout_is_the_best_validation_epoch_and_tuning_runs_skip_the_test():
    x, y, mask = _token_task(seed=2)
    parts = [torch.arange(0, 128), torch.arange(128, 160), torch.arange(160, 240)]
    tr, va, te = (R.PackedTokens.from_padded(x[i], mask[i]) for i in parts)
    # a fast rate and many prototypes overfit: the best epoch comes well before the last
    cfg = dataclasses.replace(T.DDCL_READOUT, heads=4, head_dim=8, max_epochs=30, min_epochs=8,
                              batch_size=16, lr=3e-2, init_sequences=64, patience=6)
    run = P.ddcl_readout_fit(tr, y[parts[0]], va, y[parts[1]], num_prototypes=8, config=cfg,
                             seed=0, num_classes=2)
    assert run.test_correct is None and run.best_epoch < run.epochs
    with pytest.raises(ValueError, match="test_correct"):
        run.selected_test_acc
    # the training accuracy is the best epoch's, not the last one's: rerun and stop there
    stop = dataclasses.replace(cfg, max_epochs=run.best_epoch, min_epochs=run.best_epoch)
    short = P.ddcl_readout_fit(tr, y[parts[0]], va, y[parts[1]], num_prototypes=8,
                               config=stop, seed=0, num_classes=2)
    assert short.train_acc == run.train_acc and short.val_loss == run.val_loss[:run.best_epoch]
    with pytest.raises(ValueError, match="test"):
        P.ddcl_readout_fit(tr, y[parts[0]], va, y[parts[1]], te, None, num_prototypes=8,
                           config=cfg, seed=0)


def test_a_run_that_hits_the_epoch_cap_is_not_finished():
    x, y, mask = _token_task(seed=1)
    parts = [torch.arange(0, 128), torch.arange(128, 160), torch.arange(160, 240)]
    tr, va, te = (R.PackedTokens.from_padded(x[i], mask[i]) for i in parts)
    cfg = dataclasses.replace(T.DDCL_READOUT, head_dim=8, max_epochs=2, min_epochs=2,
                              batch_size=32, init_sequences=64)
    run = P.ddcl_readout_fit(tr, y[parts[0]], va, y[parts[1]], te, y[parts[2]],
                             num_prototypes=2, config=cfg, seed=0)
    assert run.epochs == 2 and run.stopped == "max epochs" and not run.finished


def test_the_readout_configuration_is_one_and_checked():
    assert T.ddcl_readout_config() is T.DDCL_READOUT
    cfg = T.ddcl_readout_config()
    assert cfg.objective == "quantisation" and 0 < cfg.relative_temperature < 1
    assert cfg.heads == 1 and "1 head of width" in cfg.describe()     # D17 reads it as is
    assert "4 heads of width" in dataclasses.replace(cfg, heads=4).describe()
    assert "T_c of L_q" in cfg.describe()
    with pytest.raises(ValueError, match="objective"):
        dataclasses.replace(cfg, objective="other")
    with pytest.raises(ValueError, match="min_epochs"):
        dataclasses.replace(cfg, min_epochs=cfg.max_epochs + 1)


def test_encoder_max_length_reads_the_sentence_transformers_config(tmp_path):
    class Fake:
        source = str(tmp_path)

    (tmp_path / "sentence_bert_config.json").write_text('{"max_seq_length": 256}')
    assert T.encoder_max_length(Fake()) == 256


def test_reference_profile_has_confirmatory_seeds_equal_grids_of_32_and_larger_draws(
        monkeypatch):
    from ddcl_theory.runtime.settings import confirmatory_seeds

    monkeypatch.setenv(profile.PROFILE_ENV, "reference")
    ref = T.TextReadoutSettings.from_profile()
    assert ref.seeds == confirmatory_seeds(10) and min(ref.seeds) >= 1000
    assert ref.imdb_max_length == ref.ng_max_length == ref.sst2_max_length == 256
    assert ref.readout == T.DDCL_READOUT
    assert ref.grid_size == len(ref.probe_cs) == 32 and ref.scales[-1] == 1.0
    for name, classes in (("sst2", 2), ("imdb", 2), ("20ng", 20)):
        grid = T.ddcl_grid(name, classes, ref)
        assert len(grid) == len(set(grid)) == 32
        assert {p.k for p in grid} == {classes, T.second_k(name, classes), 16, 64}
    assert T.second_k("imdb", 2) == 4 and T.second_k("sst2", 2) == 4
    assert T.second_k("20ng", 20) == 40
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    cpu = T.TextReadoutSettings.from_profile()
    # the deciding 20 Newsgroups draw of the reference is at least the cpu one
    assert (ref.ng_train, ref.ng_test) >= (cpu.ng_train, cpu.ng_test)
    assert ref.imdb_train > cpu.imdb_train and ref.imdb_test > cpu.imdb_test
    assert max(cpu.seeds) < 1000 and cpu.grid_size == len(cpu.probe_cs)


def test_settings_refuse_unequal_tuning_budgets_and_bad_scales():
    cpu = T.TextReadoutSettings()
    with pytest.raises(ValueError, match="probe_cs"):
        cpu.replace(probe_cs=cpu.probe_cs + (1.0,))
    with pytest.raises(ValueError, match="scales"):
        cpu.replace(scales=(1.0, 0.5))
    with pytest.raises(ValueError, match="scales"):
        cpu.replace(scales=(0.25, 0.5))
    with pytest.raises(ValueError, match="seeds"):
        cpu.replace(seeds=(1, 1, 2))
    with pytest.raises(ValueError, match="grid_ks"):
        T.prototype_counts("20ng", 16, cpu)                 # C = 16 = a fixed K


def test_paper_profile_scales_the_settings(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    paper = T.TextReadoutSettings.from_profile()
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    cpu = T.TextReadoutSettings.from_profile()
    assert cpu != paper and paper.encoder == "bert-base-uncased" and paper.sst2_train == 0
    with pytest.raises(ValueError, match="imdb_test"):
        dataclasses.replace(cpu, imdb_test=-1)


def test_test_parts_partition_the_test_draw_by_class_one_part_per_seed():
    y = np.repeat(np.arange(4), [30, 30, 20, 20])
    parts = T.test_parts(y, 10, seed=0)
    assert len(parts) == 10 and sorted(np.concatenate(parts).tolist()) == list(range(100))
    for part in parts:
        assert np.bincount(y[part], minlength=4).tolist() == [3, 3, 2, 2]
    assert [p.tolist() for p in T.test_parts(y, 10, seed=0)] == [p.tolist() for p in parts]
    assert T.test_parts(y, 1, seed=0)[0].tolist() == list(range(100))
    with pytest.raises(ValueError, match="y_test"):
        T.test_parts(y, 21, seed=0)


def test_scale_rows_draw_a_stratified_share_of_the_training_draw_per_seed():
    y = np.repeat([0, 1], [60, 40])
    half = T.scale_rows(y, 0.5, seed=3)
    assert len(half) == 50 and np.bincount(y[half]).tolist() == [30, 20]
    assert np.all(np.diff(half) > 0)
    assert T.scale_rows(y, 1.0, seed=3).tolist() == list(range(100))
    assert not np.array_equal(T.scale_rows(y, 0.5, seed=4), half)


def test_the_stronger_probe_is_named_on_validation_and_ties_go_to_the_mean():
    score = P.Score
    tuning = T.Tuning(grid=[T.GridPoint(2, 1, 1e-3, 0.25)], ddcl=[score((0.7,), (0.6,))],
                      ddcl_finished=[1], cs=(0.1, 1.0),
                      probes={"mean": [score((0.8,), (0.5,)), score((0.7,), (0.4,))],
                              "[CLS]": [score((0.8,), (0.5,)), score((0.6,), (0.4,))]},
                      n_fit=80, n_val=20)
    assert tuning.stronger == "mean" and tuning.chosen_c("[CLS]") == 0.1
    tuning.probes["[CLS]"][1] = score((0.8,), (0.45,))        # same accuracy, lower loss
    assert tuning.stronger == "[CLS]" and tuning.chosen_c("[CLS]") == 1.0
    assert tuning.chosen == tuning.grid[0] and tuning.best_score("DDCL").mean_acc == 0.7


@pytest.mark.skipif(not all(T.FILES[k] and __import__("ddcl_theory.data", fromlist=["find"])
                            .find(k) for k in ("sst2_train", "sst2_dev")),
                    reason="SST-2 not in a data directory")
def test_run_corpus_end_to_end_with_a_fake_encoder(tmp_path, monkeypatch):
    monkeypatch.setenv("DDCL_CACHE_DIR", str(tmp_path))
    readout = dataclasses.replace(T.DDCL_READOUT, max_epochs=4, min_epochs=1)
    s = T.TextReadoutSettings().replace(sst2_train=200, sst2_max_length=8, seeds=(0, 1),
                                        readout=readout, cluster_seeds=2, cluster_steps=5,
                                        cluster_tokens=500, grid_heads=(1,),
                                        probe_cs=(1e-3, 1e-1))
    enc = FakeEncoder()
    r = T.run_corpus("sst2", s, enc)
    assert r.n_train == 200 and r.n_test == 872 and r.full_test == 872
    assert [p.k for p in r.tuning.grid] == [2, 16] and r.tuning.n_val == 40
    assert set(r.scales) == {0.5, 1.0} and all(len(v) == 2 for v in r.scales.values())
    half, whole = r.scales[0.5][0], r.scales[1.0][0]
    assert half.n_fit + half.n_val == 100 and whole.n_fit + whole.n_val == 200
    # each seed is scored on its own part of the test draw; both arms on the same items
    parts = [s_.test_rows for s_ in r.seeds]
    assert sorted(np.concatenate(parts).tolist()) == list(range(872))
    for run in r.seeds:
        assert len(run.ddcl.test_correct) == len(run.test_rows)
        assert all(len(p.test_correct) == len(run.test_rows) for p in run.probes.values())
        assert run.probes["mean"].c == r.tuning.chosen_c("mean")
        diff = run.paired("mean")
        assert set(np.unique(diff)) <= {-1, 0, 1}
        assert diff.mean() == pytest.approx(run.ddcl.selected_test_acc
                                            - run.probes["mean"].test_acc)
    assert r.min_v >= 0 and r.identity < 1e-4
    assert {(c.method, c.k) for c in r.clusters} == {
        (m, 2) for m in ("k-means on [CLS]", "k-means on mean", "DDCL on tokens", "DDCL on mean")}
    calls = enc.calls
    T.run_corpus("sst2", s, enc)                    # the second run reads the cache
    assert enc.calls == calls


def test_a_killed_ddcl_probe_resumes_to_the_same_numbers(tmp_path, monkeypatch):
    from ddcl_theory.runtime import training
    from ddcl_theory.runtime.rundir import RunDir

    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(60, 5, 6, generator=gen), torch.arange(60) % 2
    x[y == 1, :2, 0] += 3.0
    mask = torch.ones(60, 5, dtype=torch.bool)
    train = R.PackedTokens.from_padded(x[:40], mask[:40])
    test = R.PackedTokens.from_padded(x[40:], mask[40:])
    cfg = P.TrainConfig(epochs=4, batch_size=16, lr=5e-3)

    def probe(run=None):
        return P.ddcl_probe(train, y[:40], test, y[40:], num_prototypes=3, config=cfg, seed=0,
                            head_dim=4, run=run, name="probe")

    whole = probe()
    real_fit = training.fit

    def killed_fit(*args, end_of_round, **kwargs):
        def end(r):
            if r == 2:
                raise KeyboardInterrupt                   # killed after two saved epochs
            return end_of_round(r)
        return real_fit(*args, end_of_round=end, **kwargs)

    run = RunDir("probe-resume", cfg, root=tmp_path, enabled=True)
    monkeypatch.setattr(P, "fit", killed_fit)
    with pytest.raises(KeyboardInterrupt):
        probe(run)
    monkeypatch.setattr(P, "fit", real_fit)
    resumed = probe(RunDir("probe-resume", cfg, root=tmp_path, enabled=True))
    assert resumed == whole and len(resumed.v) == 4 * 3


def test_a_killed_ddcl_clustering_resumes_to_the_same_labels(tmp_path, monkeypatch):
    from ddcl_theory.runtime import training
    from ddcl_theory.runtime.rundir import RunDir

    gen = torch.Generator().manual_seed(2)
    docs = torch.randn(90, 3, generator=gen) + 5.0 * (torch.arange(90) % 3 == 0)[:, None]
    data = R.PackedTokens(docs, torch.arange(91))
    whole = P.ddcl_clusters(data, 3, seed=0, steps=12)
    real_fit = training.fit

    def killed_fit(*args, end_of_round, **kwargs):
        def end(r):
            if r == 7:
                raise KeyboardInterrupt                   # saves every 3 steps: at 3 and 6
            return end_of_round(r)
        return real_fit(*args, end_of_round=end, **kwargs)

    settings = P.TrainConfig()
    run = RunDir("clusters-resume", settings, root=tmp_path, enabled=True)
    monkeypatch.setattr(P, "fit", killed_fit)
    with pytest.raises(KeyboardInterrupt):
        P.ddcl_clusters(data, 3, seed=0, steps=12, run=run, name="c")
    assert run.state_path("c").is_file()
    monkeypatch.setattr(P, "fit", real_fit)
    resumed = P.ddcl_clusters(data, 3, seed=0, steps=12, name="c",
                              run=RunDir("clusters-resume", settings, root=tmp_path,
                                              enabled=True))
    assert (resumed.labels == whole.labels).all()
    assert (resumed.l_q, resumed.l_ols, resumed.v) == (whole.l_q, whole.l_ols, whole.v)
    assert torch.equal(resumed.layer.prototypes, whole.layer.prototypes)


# ------------------------------------------------------------------------------ IMDB's source
@pytest.fixture
def fake_imdb(monkeypatch):
    """Stand-ins for the staged subset and the full set (4 reviews a split, 2 a class)."""
    def split(tag):
        return lambda name: ([f"{tag} {name} review {i}" for i in range(4)],
                             np.array([0, 0, 1, 1], dtype=np.int64))

    monkeypatch.setattr(T, "load_imdb", split("subset"))
    monkeypatch.setattr(T, "load_imdb_full", split("full"))
    monkeypatch.setattr(T.paper_files, "find", lambda key: f"/data/{key}")
    monkeypatch.setattr(T.paper_files, "read_record",
                        lambda key, path: {"content": f"digest-of-{key}-at-{path}"})


def test_imdb_comes_from_the_staged_subset_or_every_review(fake_imdb):
    train, test, checksum = T.load_imdb_splits("subset")
    assert train[0][0] == "subset train review 0" and test[0][0] == "subset test review 0"
    assert checksum == T.FILES["imdb"].sha256
    train, test, checksum = T.load_imdb_splits("full")
    assert train[0][0] == "full train review 0" and test[0][0] == "full test review 0"
    assert checksum == "imdb_full:digest-of-imdb_full-at-/data/imdb_full"
    with pytest.raises(ValueError, match=r"source: expected one of \('subset', 'full'\)"):
        T.load_imdb_splits("all")
    # the corpus draws from the settings' source, and its embeddings are keyed by it
    full = T.load_corpus("imdb", T.TextReadoutSettings(imdb_train=0, imdb_test=0,
                                                       imdb_source="full"))
    assert full.train_texts[0].startswith("full train") and full.full_train == 4
    assert full.checksum.startswith("imdb_full:")
    subset = T.load_corpus("imdb", T.TextReadoutSettings(imdb_train=0, imdb_test=0))
    assert subset.train_texts[0].startswith("subset train") and subset.checksum != full.checksum


def test_a_missing_full_imdb_stops_a_paper_run_and_is_stood_in_for_by_the_smoke_run(
        fake_imdb, monkeypatch, capsys):
    def missing(_split):
        raise FileNotFoundError("IMDB (full): imdb_full.tsv.gz not in any data directory")

    monkeypatch.setattr(T, "load_imdb_full", missing)
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.setenv("DDCL_ALLOW_CPU", "1")
    with pytest.raises(FileNotFoundError, match="imdb_full.tsv.gz"):
        T.load_imdb_splits("full")
    monkeypatch.setenv(profile.SMOKE_ENV, "1")
    train, _, checksum = T.load_imdb_splits("full")
    assert train[0][0].startswith("subset") and checksum == T.FILES["imdb"].sha256
    assert "NOTICE: the smoke run reads the staged IMDB subset" in capsys.readouterr().out


def test_the_paper_profile_reads_every_imdb_review(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.setenv("DDCL_ALLOW_CPU", "1")
    s = T.TextReadoutSettings.from_profile()
    assert (s.imdb_source, s.imdb_train, s.imdb_test) == ("full", 0, 0)
    for name in ("cpu", "reference"):
        monkeypatch.setenv(profile.PROFILE_ENV, name)
        assert T.TextReadoutSettings.from_profile().imdb_source == "subset"
