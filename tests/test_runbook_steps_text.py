"""The runbook's step and encoding counts of the text, language-model, debris and timing entries
and their training examples (:mod:`ddcl_theory.runbook.steps_text`): against the registry, the
smoke run's measured steps and examples, the paper settings' data sets, and ``steps_taken()`` and
``counting_flops()`` on tiny real runs."""
from __future__ import annotations

import dataclasses

import pytest

from _text_fakes import FakeEncoder
from ddcl_theory.data import find
from ddcl_theory.experiments import laplacian_lm as LM
from ddcl_theory.experiments import orbital_debris as OD
from ddcl_theory.experiments import stacked_layers as SL
from ddcl_theory.experiments.registry import entries
from ddcl_theory.runbook.steps_text import ENCODED, EXAMPLES, STEPS
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.training import counting_flops, steps_taken

TRAINING = ("laplacian_lm.run", "orbital_debris.run", "text_readout.run", "stacked_layers.run",
            "peer_readouts.run")
NOTHING = ("scaling.run", "annealing.run", "cooling.run", "overhead.run",
           "eps_ablation.linear_analysis")
#: Steps that ``python -m ddcl_theory.experiments.smoke --threads 1`` measured per entry.
SMOKE_MEASURED = {"laplacian_lm.run": 2, "orbital_debris.run": 60, "text_readout.run": 28,
                  "stacked_layers.run": 2, "peer_readouts.run": 40}
#: Examples per model class that ``python -m ddcl_theory.experiments.smoke --flops --threads 1``
#: measured (``training.models[class].examples``): the LM counts seeds x batch x block
#: tokens per stacked step, a full-batch DDCL fit on one (1, tokens, F) sequence 1 per step.
SMOKE_EXAMPLES = {
    "laplacian_lm.run": {"StackedModels[d=768]": 2_048},
    "orbital_debris.run": {"DDCLAttention": 50, "QuantizedMLPAutoencoder": 5_000},
    "text_readout.run": {"DDCLPooledReadout": 480, "DDCLAttention": 16},
    "stacked_layers.run": {"StackedDDCL": 64},
    "peer_readouts.run": {"ReadoutClassifier": 2_482},
}


def _settings(name: str, smoke: bool):
    entry = next(e for e in entries() if e.name == name)
    prof = profile.Profile("paper", "cuda", smoke=smoke)
    return entry.settings_class().for_profile(prof, **entry.overrides)


def test_steps_cover_exactly_these_registry_entries():
    assert set(STEPS) == set(TRAINING + NOTHING)
    assert set(STEPS) <= {e.name for e in entries()}
    assert set(ENCODED) == {"text_readout.run", "stacked_layers.run", "peer_readouts.run"}
    assert set(EXAMPLES) == set(STEPS)


@pytest.mark.parametrize("smoke", [False, True])
@pytest.mark.parametrize("name", TRAINING + NOTHING)
def test_counts_are_non_negative_ints(name, smoke):
    n = STEPS[name](_settings(name, smoke))
    assert isinstance(n, int) and not isinstance(n, bool)
    assert (n > 0) if name in TRAINING else (n == 0)


@pytest.mark.parametrize("name", TRAINING)
def test_the_smoke_settings_give_the_measured_smoke_steps(name):
    assert STEPS[name](_settings(name, smoke=True)) == SMOKE_MEASURED[name]


@pytest.mark.parametrize("name", TRAINING)
def test_the_smoke_settings_give_the_measured_smoke_examples(name):
    assert EXAMPLES[name](_settings(name, smoke=True)) == SMOKE_EXAMPLES[name]


@pytest.mark.parametrize("smoke", [False, True])
@pytest.mark.parametrize("name", TRAINING + NOTHING)
def test_examples_are_non_negative_ints_per_class_and_at_least_one_per_step(name, smoke):
    s = _settings(name, smoke)
    per_class = EXAMPLES[name](s)
    assert isinstance(per_class, dict)
    assert all(isinstance(c, str) and c for c in per_class)
    assert all(isinstance(n, int) and not isinstance(n, bool) and n > 0
               for n in per_class.values())
    assert sum(per_class.values()) >= STEPS[name](s)
    assert per_class if name in TRAINING else per_class == {}


def test_the_paper_examples():
    paper = {name: EXAMPLES[name](_settings(name, False)) for name in TRAINING}
    # 2 arms; every length x 5 seeds (5 trend seeds = all 5); batch 64 x context 1,024 tokens
    assert paper["laplacian_lm.run"] == {
        "StackedModels[d=768]": 2 * (1250 + 2500 + 5000) * 5 * 64 * 1024}
    # one example per head step, the 20,000 objects per readout step
    assert paper["orbital_debris.run"] == {"DDCLAttention": 500 * (10 * (26 + 2 * 3) + 2 * 3),
                                           "QuantizedMLPAutoencoder": 500 * 2 * 20_000}
    assert paper["stacked_layers.run"] == {"StackedDDCL": 40 * 10 * 11_314}
    assert set(paper["text_readout.run"]) == {"DDCLPooledReadout", "DDCLAttention"}
    assert set(paper["peer_readouts.run"]) == {"ReadoutClassifier"}


def test_the_paper_settings_encode_the_full_data_sets():
    # SST-2 train + dev, every IMDB review, 20NG bydate
    paper = _settings("text_readout.run", False)
    assert paper.imdb_source == "full"
    assert ENCODED["text_readout.run"](paper) == (
        67_349 + 872 + 25_000 + 25_000 + 11_314 + 7_532, 512)
    # the staged 5,000 + 5,000 subset where the settings ask for it
    assert ENCODED["text_readout.run"](paper.replace(imdb_source="subset")) == (
        67_349 + 872 + 5_000 + 5_000 + 11_314 + 7_532, 512)
    assert ENCODED["stacked_layers.run"](_settings("stacked_layers.run", False)) == (11_314, 512)
    assert ENCODED["peer_readouts.run"](_settings("peer_readouts.run", False)) == (
        11_314 + 7_532, 256)


def test_the_paper_counts():
    paper = {name: STEPS[name](_settings(name, False)) for name in TRAINING}
    assert paper["laplacian_lm.run"] == 2 * (1250 + 2500 + 5000) * 5     # stacks of one seed
    assert paper["orbital_debris.run"] == 500 * (10 * (26 + 2 * 3) + 2 * 4)
    assert paper["stacked_layers.run"] == 40 * 10 * -(-11_314 // 50)


@pytest.mark.parametrize("name, field", [
    ("laplacian_lm.run", "seeds"), ("orbital_debris.run", "seeds"),
    ("text_readout.run", "seeds"), ("stacked_layers.run", "seeds"),
    ("peer_readouts.run", "seeds"), ("peer_readouts.run", "sweep_seeds")])
def test_more_seeds_never_fewer_steps(name, field):
    s = _settings(name, False)
    more = s.replace(**{field: getattr(s, field) + (max(getattr(s, field)) + 1,)})
    assert STEPS[name](more) >= STEPS[name](s)


@pytest.mark.parametrize("name, field", [
    ("orbital_debris.run", "epochs"), ("stacked_layers.run", "epochs"),
    ("peer_readouts.run", "epochs"), ("peer_readouts.run", "sweep_epochs"),
    ("laplacian_lm.run", "rounds")])
def test_steps_grow_with_the_epochs(name, field):
    s = _settings(name, False)
    if name == "laplacian_lm.run":      # rounds divide the lengths: the steps stay the same
        assert STEPS[name](s.replace(rounds=5)) == STEPS[name](s)
        return
    assert STEPS[name](s.replace(**{field: getattr(s, field) + 1})) > STEPS[name](s)


def test_the_text_readout_grows_with_its_epochs_grid_and_draws():
    s = _settings("text_readout.run", True)
    base = STEPS["text_readout.run"](s)
    longer = s.replace(readout=dataclasses.replace(s.readout, max_epochs=3))
    assert STEPS["text_readout.run"](longer) > base
    assert STEPS["text_readout.run"](s.replace(grid_heads=(1, 4), probe_cs=(1e-2, 1e-1))) > base
    assert STEPS["text_readout.run"](s.replace(sst2_train=640)) > base
    assert STEPS["text_readout.run"](s.replace(sst2_train=0)) > \
        STEPS["text_readout.run"](s.replace(sst2_train=640))


def _measured(run, *args, **kwargs) -> int:
    before = steps_taken()
    run(*args, **kwargs)
    return steps_taken() - before


def test_orbital_debris_takes_the_counted_steps():
    s = OD.DebrisSettings().replace(n_objects=40, seeds=(0, 1), trend_objects=(20,),
                                    trend_seeds=1, starts=2, epochs=2, beside_seeds=1,
                                    gmm_covariances=("diag",))
    assert _measured(OD.run, s) == STEPS["orbital_debris.run"](s) == 2 * (2 * 3 + 1 * 4)


def test_laplacian_lm_takes_the_counted_steps():
    s = LM.LMSettings().replace(dim=8, heads=4, laplacian_heads=2, depth=1, block_size=8,
                                batch_size=2, steps=(2, 4), rounds=2, seeds=(0, 1),
                                trend_seeds=1, eval_windows=8, heldout_tokens=200,
                                cdnv_min_count=2)
    assert _measured(LM.run, s) == STEPS["laplacian_lm.run"](s) == 2 * (2 + 4)
    # stacks of one seed: the 2-seed length steps once per seed
    one = s.replace(stack_size=1)
    assert _measured(LM.run, one) == STEPS["laplacian_lm.run"](one) == 2 * (2 + 2 * 4)


class _Counting(FakeEncoder):
    """The fake encoder, counting the documents it encodes and their longest truncation."""

    def __init__(self) -> None:
        super().__init__()
        self.documents, self.longest = 0, 0

    def encode(self, texts, max_length):
        texts = list(texts)
        self.documents += len(texts)
        self.longest = max(self.longest, max_length)
        return super().encode(texts, max_length)


@pytest.mark.skipif(find("20newsgroups") is None, reason="20 Newsgroups not in a data directory")
def test_stacked_layers_takes_the_counted_steps_and_encodes_the_counted_documents(
        tmp_path, monkeypatch):
    monkeypatch.setenv("DDCL_CACHE_DIR", str(tmp_path))
    s = SL.StackedSettings().replace(k1=4, k2=3, epochs=2, batch_docs=7, documents=45,
                                     max_length=10, scales=(0.5, 1.0), seeds=(0, 1))
    encoder = _Counting()
    # scale 0.5: round(22.5) = 22 documents, 4 batches; scale 1: 45 documents, 7 batches
    assert _measured(SL.run, s, encoder=encoder) == STEPS["stacked_layers.run"](s) \
        == 2 * 2 * (4 + 7)
    assert (encoder.documents, encoder.longest) == ENCODED["stacked_layers.run"](s) == (45, 10)


def _counted(run, *args, **kwargs) -> dict:
    with counting_flops() as totals:
        run(*args, **kwargs)
    return dict(totals)


def _examples(totals: dict) -> dict[str, int]:
    """``{model class: examples}`` of a :func:`counting_flops` block."""
    return {cls: record["examples"] for cls, record in totals["models"].items()}


def test_orbital_debris_sees_the_counted_examples():
    s = OD.DebrisSettings().replace(n_objects=40, seeds=(0, 1), trend_objects=(20,),
                                    trend_seeds=1, starts=2, epochs=2, beside_seeds=1,
                                    gmm_covariances=("diag",))
    totals = _counted(OD.run, s)
    # 9 head fits (1 example a step: one (1, N, F) sequence) and 1 readout fit (40 rows)
    assert totals["steps"] == STEPS["orbital_debris.run"](s) == 20
    assert _examples(totals) == EXAMPLES["orbital_debris.run"](s) == {
        "DDCLAttention": 2 * 9, "QuantizedMLPAutoencoder": 2 * 40}


def test_laplacian_lm_sees_the_counted_examples():
    s = LM.LMSettings().replace(dim=8, heads=4, laplacian_heads=2, depth=1, block_size=8,
                                batch_size=2, steps=(2, 4), rounds=2, seeds=(0, 1),
                                trend_seeds=1, eval_windows=8, heldout_tokens=200,
                                cdnv_min_count=2)
    totals = _counted(LM.run, s)
    # 2 arms; 2 steps of 1 seed, 4 steps of 2 stacked seeds; (seeds, 2, 8) character ids a step
    assert totals["steps"] == STEPS["laplacian_lm.run"](s) == 2 * (2 + 4)
    assert _examples(totals) == EXAMPLES["laplacian_lm.run"](s) == {
        "StackedModels[d=8]": 2 * (2 * 1 + 4 * 2) * 2 * 8}
    one = s.replace(stack_size=1)                     # the same examples, in more steps
    assert _examples(_counted(LM.run, one)) == EXAMPLES["laplacian_lm.run"](one) == \
        EXAMPLES["laplacian_lm.run"](s)
