"""The step counts of the image experiments (:mod:`ddcl_theory.runbook.steps_images`): they cover
their registry entries, give the steps the paper smoke run measured, grow with the budgets, and
equal ``steps_taken()`` on tiny real runs (at most it where early stopping cuts a run); and so
do the example counts per model class (:data:`~ddcl_theory.runbook.steps_images.EXAMPLES`)
against ``counting_flops()``'s ``models``."""
from __future__ import annotations

import numpy as np
import pytest

from ddcl_theory.data import dense_proxy
from ddcl_theory.experiments import dense_features as df
from ddcl_theory.experiments import eps_ablation as ea
from ddcl_theory.experiments import laplacian_readout as lr
from ddcl_theory.experiments import laplacian_study as ls
from ddcl_theory.experiments import learned_attention as la
from ddcl_theory.experiments.registry import entries
from ddcl_theory.runbook.steps_images import EXAMPLES, STEPS
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.training import counting_flops, steps_taken

from _study_images import synthetic_images

#: Steps each entry took in the paper smoke run (``python -m ddcl_theory.experiments.smoke
#: --report``, CPU, paper shapes with smoke budgets).
SMOKE_MEASURED = {
    "ddcl_layer.run_patch_prototypes": 2,
    "ddcl_layer.run_transformer": 12,
    "eps_ablation.run_scales": 192,
    "eps_ablation.run_scales[optimiser=sgd]": 192,
    "eps_ablation.run": 192,
    "learned_attention.run[causal=True]": 12,
    "learned_attention.run[causal=False]": 12,
    "laplacian_study.run_vit": 7,
    "dense_features.run": 163,
    "dino_study.run": 168,
    "soft_vq.run": 16,
    "laplacian_readout.run": 4,
}

#: The formulas on the paper settings, each worked out by hand from the run functions.
PAPER = {
    "ddcl_layer.run_patch_prototypes": 1000,
    "ddcl_layer.run_transformer": 3 * 12 * 30 * (50 + 100 + 180),
    "eps_ablation.run_scales": 6 * 40 * (12 + 24 + 48) * 32,
    "eps_ablation.run_scales[optimiser=sgd]": 6 * 40 * (12 + 24 + 48) * 32,
    "eps_ablation.run": 6 * 40 * 48 * 32,
    "learned_attention.run[causal=True]": 3000,
    "learned_attention.run[causal=False]": 3000,
    "laplacian_study.run_vit": 4 * 400 * (20 + 49 + 96) + 2 * 500 * 2 + 2 * 400 * 20,
    "dense_features.run": (2 * 4 * (8000 + 3 * 500) + 10 * 9 * 500 + 4 * 2 * 8000
                           + 4 * 2 * (2000 + 4000 + 2 * 4 * 500) + 10 * 2 * (8000 + 4 * 500)),
    "dino_study.run": ((6 * 100 + 8 * 25 + 8 * 50 + 52 * 100) * (9469 // 256)
                       + (6 + 68) * (2 * 1000 + 1000) + 26 * 2 * (1000 + 1000)),
    "soft_vq.run": 18 * 71 + 10 * 4 * 50 * (2 + 12 + 71) + 50 * 71,
    "laplacian_readout.run": 2 * 43 * 100 * (8 + 24 + 71),
}

ENTRIES = {e.name: e for e in entries()}


def settings_of(name: str, smoke: bool):
    """The entry's settings in the paper profile (its smoke test when ``smoke``)."""
    e = ENTRIES[name]
    return e.settings_class().for_profile(profile.Profile("paper", "cpu", smoke=smoke),
                                          **e.overrides)


def measured(run, settings) -> int:
    before = steps_taken()
    run(settings)
    return steps_taken() - before


def test_steps_cover_exactly_the_image_entries_of_the_registry():
    assert set(STEPS) == set(SMOKE_MEASURED)
    assert set(STEPS) <= set(ENTRIES)


@pytest.mark.parametrize("smoke", [True, False], ids=["smoke", "paper"])
@pytest.mark.parametrize("name", sorted(SMOKE_MEASURED))
def test_each_formula_gives_a_positive_int(name, smoke):
    n = STEPS[name](settings_of(name, smoke))
    assert type(n) is int and n > 0


@pytest.mark.parametrize("name", sorted(SMOKE_MEASURED))
def test_the_smoke_settings_give_the_steps_the_smoke_run_measured(name):
    assert STEPS[name](settings_of(name, smoke=True)) == SMOKE_MEASURED[name]


@pytest.mark.parametrize("name", sorted(PAPER))
def test_the_paper_settings_give_the_hand_worked_totals(name):
    assert STEPS[name](settings_of(name, smoke=False)) == PAPER[name]


@pytest.mark.parametrize("name", sorted(SMOKE_MEASURED))
def test_steps_grow_with_the_budget(name):
    s = settings_of(name, smoke=False)
    budget = next(f for f in ("epochs", "steps", "probe_steps", "cls_probe_steps") if hasattr(s, f)
                  and isinstance(getattr(s, f), int))
    longer = s.replace(**{budget: getattr(s, budget) + 1})
    assert STEPS[name](longer) > STEPS[name](s)


@pytest.mark.parametrize("name", sorted(n for n in SMOKE_MEASURED
                                        if hasattr(settings_of(n, False), "seeds")))
def test_more_seeds_take_more_steps_unless_they_are_stacked(name):
    s = settings_of(name, smoke=False)
    more = s.replace(seeds=(*s.seeds, max(s.seeds) + 1))
    if name == "laplacian_study.run_vit":       # one stacked model: one step for all seeds
        assert STEPS[name](more) == STEPS[name](s)
    else:
        assert STEPS[name](more) > STEPS[name](s)


@pytest.mark.parametrize("causal,steps", [(True, 23), (False, 9)])
def test_learned_attention_takes_its_steps_whatever_the_rounds(causal, steps):
    s = la.LearnedAttentionSettings(causal=causal, seq_len=8, dim=8, heads=2, steps=steps,
                                    samples=2)
    name = f"learned_attention.run[causal={causal}]"
    assert measured(la.run, s) == STEPS[name](s) == steps


def test_eps_sweep_formula_matches_a_tiny_run():
    s = ea.SGDBesideSettings(eps_values=(0.1, 1.0), seeds=(0, 3), n_train_per_class=7, n_test=20,
                             hidden=8, dim=4, num_prototypes=3, epochs=3, batch_size=8)
    assert measured(ea.run, s) == STEPS["eps_ablation.run"](s) == 2 * 2 * 3 * 2


def _tiny_vit(patience: int, **changes) -> ls.ViTStudySettings:
    return ls.ViTStudySettings(**changes,
        n_train=(40, 80), n_val=48, n_test=60, n_train_eval=30, patch=4, dim=8, depth=1,
        heads=2, batch_size=16, epochs=4, patience=patience, lr=3e-2,
        head_settings=("0", "all"), seeds=(0, 1),
        terminal=ls.TerminalSettings(n_train=30, epochs=3, seeds=(0, 1, 2)),
        wide=ls.WidthSettings(dims=(16,), n_train=80, seeds=(0,)))


def test_vit_study_counts_one_step_per_stacked_batch():
    s = _tiny_vit(patience=4)                    # patience = epochs: no early stop
    want = 2 * 4 * (3 + 5) + 2 * 3 * 2 + 2 * 4 * 5
    assert STEPS["laplacian_study.run_vit"](s) == want
    assert measured(lambda st: ls.run_vit(st, synthetic_images()), s) == want


def test_early_stopping_stays_within_the_planned_maximum():
    s = lr.ReadoutSettings(n_train=(48, 96), n_val=48, n_test=60, patch=4, dim=8, depth=1,
                           heads=2, mlp_ratio=2, num_prototypes=4, ddcl_heads=2, batch_size=32,
                           epochs=4, patience=1, seeds=(0, 1))
    got = measured(lambda st: lr.run(st, synthetic_images()), s)
    assert 0 < got <= STEPS["laplacian_readout.run"](s) == 2 * 2 * 4 * (2 + 3)


# ------------------------------------------------------------------------------ examples

#: Examples each entry's steps saw in the paper smoke run, per model class (``python -m
#: ddcl_theory.experiments.smoke --flops``: ``training.models[class].examples``).
SMOKE_EXAMPLES = {
    "ddcl_layer.run_patch_prototypes": {"DDCLAttention": 2 * 5000},
    "ddcl_layer.run_transformer": {"DDCLTransformer": 600},
    "eps_ablation.run_scales": {"JointModel": 12000},
    "eps_ablation.run_scales[optimiser=sgd]": {"JointModel": 12000},
    "eps_ablation.run": {"JointModel": 12000},
    "learned_attention.run[causal=True]": {"_OneLayer": 12 * 16 * 128},
    "learned_attention.run[causal=False]": {"_OneLayer": 12 * 16 * 128},
    "laplacian_study.run_vit": {"StackedModels[d=384]": 44, "StackedModels[d=768]": 16},
    "dense_features.run": {"Linear": 164960, "SegmentationViT": 8192, "SelfDistillation": 256},
    "dino_study.run": {"Linear": 120720, "SelfDistillation": 64},
    "soft_vq.run": {"VQVAE": 2000},
    "laplacian_readout.run": {"ViTDDCL": 128},
}


def counted(run, settings) -> dict:
    with counting_flops() as totals:
        run(settings)
    return totals


def per_class(totals: dict) -> dict[str, int]:
    return {cls: record["examples"] for cls, record in totals["models"].items()}


def test_examples_cover_the_entries_of_steps():
    assert set(EXAMPLES) == set(STEPS) == set(SMOKE_EXAMPLES)


@pytest.mark.parametrize("name", sorted(SMOKE_EXAMPLES))
def test_the_smoke_settings_give_the_examples_the_smoke_run_measured(name):
    assert EXAMPLES[name](settings_of(name, smoke=True)) == SMOKE_EXAMPLES[name]


@pytest.mark.parametrize("name", sorted(SMOKE_EXAMPLES))
def test_every_step_sees_at_least_one_example(name):
    s = settings_of(name, smoke=False)
    got = EXAMPLES[name](s)
    assert type(got) is dict and got
    assert all(type(cls) is str and type(n) is int and n >= 0 for cls, n in got.items())
    assert sum(got.values()) >= STEPS[name](s) > 0


def test_eps_sweep_examples_count_the_short_last_batch_at_its_size():
    s = ea.SGDBesideSettings(eps_values=(0.1, 1.0), seeds=(0, 3), n_train_per_class=7, n_test=20,
                             hidden=8, dim=4, num_prototypes=3, epochs=3, batch_size=8)
    got = counted(ea.run, s)                      # 14 images: batches of 8 and 6
    assert got["steps"] == STEPS["eps_ablation.run"](s) == 2 * 2 * 3 * 2
    assert per_class(got) == EXAMPLES["eps_ablation.run"](s) == {"JointModel": 2 * 2 * 3 * 14}


def test_learned_attention_examples_count_every_character():
    s = la.LearnedAttentionSettings(causal=False, seq_len=8, dim=8, heads=2, steps=9, batch=3,
                                    samples=2)
    got = counted(la.run, s)
    want = {"_OneLayer": 9 * 3 * 8}
    assert per_class(got) == EXAMPLES["learned_attention.run[causal=False]"](s) == want


def test_vit_study_examples_count_the_seeds_and_images_of_each_stacked_step():
    s = _tiny_vit(patience=4)                    # patience = epochs: no early stop
    got = counted(lambda st: ls.run_vit(st, synthetic_images()), s)
    assert got["steps"] == STEPS["laplacian_study.run_vit"](s)
    # seeds x images, kept per width: the sweep and terminal runs at d=8, the wide at d=16
    want = {"StackedModels[d=8]": 2 * 2 * 4 * (40 + 80) + 3 * 2 * 3 * 30,
            "StackedModels[d=16]": 1 * 2 * 4 * 80}
    assert per_class(got) == EXAMPLES["laplacian_study.run_vit"](s) == want
    # an extra seed at the largest count (80 images) adds its examples, not a step
    s = _tiny_vit(patience=4, extra_seeds=(7,))
    got = counted(lambda st: ls.run_vit(st, synthetic_images()), s)
    assert got["steps"] == STEPS["laplacian_study.run_vit"](s)
    want["StackedModels[d=8]"] += 1 * 2 * 4 * 80
    assert per_class(got) == EXAMPLES["laplacian_study.run_vit"](s) == want


def test_dense_features_examples_per_model_class(monkeypatch):
    def noise(split):
        rng = np.random.default_rng(0 if split == "train" else 1)
        return rng.uniform(0, 1, (50, 32, 32, 3)).astype(np.float32), np.arange(50) % 10
    monkeypatch.setattr(dense_proxy, "cifar_backgrounds", noise)
    s = df.DenseSettings(n_train=24, n_val=16, n_test=16, test_backgrounds="test", patch=8,
                         dim=16, depth=1, heads=2, mlp_ratio=2, out_dim=16, batch_size=8,
                         steps=(4, 6), steps_per_round=2, tune_lrs=(1e-3,), tune_seeds=(900,),
                         trend_seeds=1, weight_decay=0.0, momentum=0.9, probe_steps=3,
                         probe_lr=0.1, ceiling_steps=6, seeds=(0, 1),
                         head_settings=("0", "all"))
    got = counted(lambda st: df.run(st, run_dir=RunDir("dense", st, enabled=False)), s)
    assert got["steps"] == STEPS["dense_features.run"](s)
    dense, image = 3 * 24 * 16, 3 * 24           # 16 patches an image; probes: 3 steps
    # 2 tuning runs (1 rate, 1 tuning seed, 2 arms): a foreground probe at the settling round,
    # a foreground and an image probe at the end; floors of 2 seeds: 3 feature sets x 3
    # probes; 6 deciding runs (4 steps: the trend seed only; 6 steps: both seeds): a
    # foreground probe at the settling round and 3 probes at the end
    want = {"Linear": 2 * (2 * dense + image) + 2 * 3 * (2 * dense + image)
            + 6 * (3 * dense + image),
            "SegmentationViT": 2 * 6 * 8 * 16,   # the trend seed's 2 ceilings, (8, 16) labels
            "SelfDistillation": (2 * 6 + 2 * 4 + 4 * 6) * 8}  # float views: 8 images a step
    assert per_class(got) == EXAMPLES["dense_features.run"](s) == want


def test_dino_study_steps_and_examples_match_a_tiny_run():
    from ddcl_theory.data.ade20k import SegmentationSet
    from ddcl_theory.experiments import dino_study as ds
    st = ds.DinoStudySettings(seeds=(0, 1), epochs=(1, 2), trend_seeds=1)
    r = st.recipe                                # cpu: 32 images in batches of 8, 30-step probes
    rng = np.random.default_rng(0)
    pixels = lambda m: rng.integers(0, 256, (m, r.image_size, r.image_size, 3),  # noqa: E731
                                    dtype=np.uint8)
    seg = lambda m: SegmentationSet(pixels(m), rng.integers(  # noqa: E731
        1, 6, (m, r.image_size, r.image_size)).astype(np.uint8), ("x",) * m, "training")
    data = ds.ProbeData.split(pixels(r.pretrain_images), np.arange(32) % 10, pixels(4),
                              np.arange(4), seg(r.probe_images), seg(4), st)
    got = counted(lambda x: ds.run(x, data=data, run_dir=RunDir("dino", x, enabled=False)), st)
    # 2 tuning runs (1 rate, 2 arms, 2 epochs), 6 deciding runs (1 epoch: the trend seed;
    # 2 epochs: both seeds; 2 arms), 4 floors
    assert got["steps"] == STEPS["dino_study.run"](st) == (
        (2 * 2 + 2 * 1 + 4 * 2) * 4 + 8 * (2 * 30 + 30) + 4 * (30 + 30))
    # 6 ADE20K images to fit on; 28 Imagenette images (4 held out)
    dense, image = 30 * 6 * r.tokens, 30 * 28
    assert per_class(got) == EXAMPLES["dino_study.run"](st) == {
        "Linear": 8 * (2 * dense + image) + 4 * (dense + image),
        "SelfDistillation": (2 * 2 + 2 * 1 + 4 * 2) * 4 * 8}
