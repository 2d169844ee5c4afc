"""The paper profile's smoke test (ddcl_theory.experiments.smoke): every registered experiment declares
smoke budgets that leave the paper's shapes alone, and runs at paper settings on CPU."""
from __future__ import annotations

import dataclasses
import os

import pytest

from ddcl_theory.experiments import registry, smoke
from ddcl_theory.experiments.registry import Experiment
from ddcl_theory.runtime import profile

from _smoke_run import LM_SHARE, other_stems, run_smoke

#: Settings fields a smoke run may shrink: budgets (how long, how often, how many runs or
#: examples), never a model size or a per-example shape.
BUDGET_FIELDS = {"epochs", "steps", "seeds", "repeats", "warmup", "n_temperatures", "max_iters",
                 "n_train", "n_test", "batch_size", "batch", "eval_windows", "head_settings",
                 "seq_lens", "relative_temperatures", "n_objects", "sst2_train", "imdb_train",
                 "imdb_test", "ng_train", "ng_test", "cluster_steps", "cluster_tokens",
                 "kmeans_restarts", "text", "sweep_seeds", "sweep_epochs", "debris_train",
                 "debris_test", "cost_lengths", "trend_objects", "min_epochs", "max_epochs",
                 "cluster_seeds", "n_val", "ema_decays", "ema_thresholds", "n_train_eval",
                 "rounds", "checkpoints", "probe_at", "train_sizes", "ceiling_steps",
                 "steps_per_round", "long_epochs", "shorter_epochs", "trend_seeds", "starts",
                 "patience", "scales", "documents", "grid_taus", "grid_lrs", "grid_ks",
                 "grid_heads", "grid_second_k", "probe_cs", "tune_lrs",
                 "tune_temperature_factors", "probe_steps", "heldout_tokens", "tune_n_val",
                 "corpus_tokens", "downstream_items", "both_arms", "warmup_epochs",
                 "pretrain_images", "probe_images", "probe_val_images", "settle_images",
                 "cls_probe_steps", "image_holdout"}
#: Budgets that are schedules (the epochs or rounds at which a run is read): a smoke run's ends
#: earlier and has no more positions (it need not be a subset of the paper's).
SCHEDULE_FIELDS = {"checkpoints", "probe_at"}


SIZE_NONE_MEANS_ALL = {"heldout_tokens", "downstream_items", "pretrain_images", "probe_images",
                       "probe_val_images"}
SIZE_ZERO_MEANS_ALL = {"sst2_train", "imdb_train", "imdb_test", "ng_train", "ng_test",
                       "documents"}


def _settings(entry, monkeypatch, smoke_flag: bool):
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    if smoke_flag:
        monkeypatch.setenv(profile.SMOKE_ENV, "1")
    else:
        monkeypatch.delenv(profile.SMOKE_ENV, raising=False)
    return entry.make_settings()


def test_registry_entries_import_and_name_a_settings_class_and_a_run_function():
    entries = smoke.entries()
    assert len({e.name for e in entries}) == len(entries) >= 10
    for e in entries:
        assert dataclasses.is_dataclass(e.settings_class()), e.name
        assert callable(e.run_function()), e.name


def _fields(settings) -> dict:
    """``{field name: value}``, the fields of nested settings (e.g. ``vit``) by their own names."""
    out = {}
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        out.update(_fields(value) if dataclasses.is_dataclass(value) else {f.name: value})
    return out


@pytest.mark.parametrize("entry", smoke.entries(), ids=lambda e: e.name)
def test_smoke_changes_only_budget_fields(entry, monkeypatch):
    paper = _fields(_settings(entry, monkeypatch, smoke_flag=False))
    small = _fields(_settings(entry, monkeypatch, smoke_flag=True))
    changed = {name for name in paper if paper[name] != small[name]}
    if entry.fixed_scale:                      # one scale everywhere: the smoke run runs it whole
        assert not changed, f"{entry.name}: fixed_scale, yet its smoke settings differ"
        return
    assert changed, f"{entry.name}: no smoke budget declared"
    assert changed <= BUDGET_FIELDS, f"{entry.name}: smoke changes {changed - BUDGET_FIELDS}"
    for name in changed:                       # budgets only shrink
        big, little = paper[name], small[name]
        if name in SCHEDULE_FIELDS:
            assert len(little) <= len(big) and max(little) < max(big), (entry.name, name)
        elif isinstance(big, tuple):             # fewer runs, or as many but smaller ones
            assert len(little) < len(big) or (
                len(little) == len(big) and max(little) < max(big)), (entry.name, name)
        elif dataclasses.is_dataclass(big):
            continue                           # nested settings: checked as their own entry
        elif big is None and name in SIZE_NONE_MEANS_ALL:
            assert little > 0, (entry.name, name)   # None = the whole text; the smoke run a part
        elif big == 0 and name in SIZE_ZERO_MEANS_ALL:
            assert little > 0, (entry.name, name)   # 0 = every row; the smoke run takes a few
        else:
            assert little < big, (entry.name, name)


def test_registry_rejects_a_malformed_row():
    with pytest.raises(ValueError, match=r"EXPERIMENTS\[0\]"):
        smoke.entries([("ddcl_theory.experiments.scaling", "ScalingSettings")])
    with pytest.raises(ValueError, match="duplicate"):
        smoke.entries([Experiment("m.a", "S", "run"), Experiment("m.a", "S", "run")])


def test_failures_are_reported_by_experiment_name(monkeypatch, capsys):
    monkeypatch.setattr(registry, "EXPERIMENTS", (
        Experiment("ddcl_theory.experiments.no_such_module", "Settings", "run"),
        Experiment("ddcl_theory.experiments.eps_ablation", "LinearSettings", "linear_analysis"),
    ))
    before = {k: os.environ.get(k) for k in (profile.PROFILE_ENV, profile.SMOKE_ENV)}
    assert smoke.main([]) == 1
    out = capsys.readouterr().out
    assert "FAILED no_such_module.run" in out and "ModuleNotFoundError" in out
    assert "FAILED eps_ablation.linear_analysis" in out and "declares no smoke budget" in out
    assert "FAILED 2 of 2" in out
    assert {k: os.environ.get(k) for k in before} == before       # the profile is restored


def test_measure_entry_counts_the_training_steps_and_reads_peak_memory(monkeypatch):
    import torch

    from ddcl_theory.runtime.training import fit

    def three_by_two(entry):
        model = torch.nn.Linear(2, 1)
        x, y = torch.ones(4, 2), torch.zeros(4, 1)
        fit(model, torch.optim.SGD(model.parameters(), lr=0.1), rounds=2,
            batches=lambda r: [(x, y)] * 3, loss=lambda fwd, b: ((fwd(b[0]) - b[1]) ** 2).mean(),
            device="cpu", compile=False, desc="t")
        return 0.6

    monkeypatch.setattr(smoke, "run_entry", three_by_two)
    m = smoke.measure_entry(Experiment("m.a", "S", "run"))
    assert m.steps == 6 and m.seconds_per_step == pytest.approx(0.1)
    assert m.peak_mib > 1 and m.peak_of == "process rss"
    record = m.record("a.run")
    assert record["steps"] == 6 and record["seconds_per_step"] == pytest.approx(0.1)
    assert "100.0 ms/step" in m.line("a.run")
    monkeypatch.setattr(smoke, "run_entry", lambda entry: 0.2)       # no training loop
    exact = smoke.measure_entry(Experiment("m.b", "S", "run"))
    assert exact.steps == 0 and exact.seconds_per_step is None
    assert exact.record("b.run")["seconds_per_step"] is None and "- ms/step" in exact.line("b")
    assert "training" not in record                              # counted with --flops only
    monkeypatch.setattr(smoke, "run_entry", three_by_two)
    counted = smoke.measure_entry(Experiment("m.c", "S", "run"), flops=True).record("c.run")
    # per step: a batch of 4 examples, forward 2*2*1 and weight gradient 2*2*1 flops each
    linear = {"flops": 6 * 4 * 8, "steps": 6, "examples": 24}
    assert counted["training"] == {**linear, "models": {"Linear": linear}}


@pytest.mark.slow
def test_smoke_run_of_every_other_experiment_at_paper_settings_passes(tmp_path):
    record = run_smoke(tmp_path, other_stems())          # every entry but the language model's
    assert {o["name"]: o["steps"] for o in record["experiments"]}["laplacian_study.run_vit"] > 0


def test_the_two_smoke_tests_share_out_every_registered_experiment():
    stems = {e.name.split(".")[0] for e in smoke.entries()}
    assert set(LM_SHARE) <= stems                            # the language model test runs
    assert set(other_stems()) | set(LM_SHARE) == stems and not set(other_stems()) & set(LM_SHARE)


def test_the_scratch_folder_is_in_memory_only_where_there_is_room(monkeypatch, tmp_path):
    from collections import namedtuple
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(smoke, "MEMORY_SCRATCH", tmp_path)
    monkeypatch.setattr(smoke.shutil, "disk_usage", lambda _p: usage(0, 0, 9 * 2**30))
    monkeypatch.setattr(smoke, "_available_memory", lambda: 9 * 2**30)
    assert smoke.scratch_root() == str(tmp_path)
    monkeypatch.setattr(smoke, "_available_memory", lambda: 4 * 2**30)
    assert smoke.scratch_root() is None                       # a tmpfs larger than the memory
    monkeypatch.setattr(smoke, "_available_memory", lambda: 9 * 2**30)
    monkeypatch.setattr(smoke.shutil, "disk_usage", lambda _p: usage(0, 0, 7 * 2**30))
    assert smoke.scratch_root() is None                       # too little room: the disk
    monkeypatch.undo()
    monkeypatch.setattr(smoke, "MEMORY_SCRATCH", tmp_path / "absent")
    assert smoke.scratch_root() is None                       # no such folder
    assert smoke._available_memory() is None or smoke._available_memory() > 0
