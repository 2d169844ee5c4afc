"""The GPU runbook: the encoder's FLOPs in closed form, the page's arithmetic and its currency."""
from __future__ import annotations

import dataclasses

import pytest

from ddcl_theory.runbook import flops, page
from ddcl_theory.runbook.cpu_attention import count_cpu_attention


def _per_token(layers: int, d: int, ffn: int, length: int) -> int:
    # per token and layer: Q, K, V, output projections 4 * 2d^2, the MLP 2 * 2 * d * ffn,
    # scores and the weighted sum of values 2 * 2 * length * d
    return layers * (8 * d * d + 4 * d * ffn + 4 * length * d)


def test_bert_base_forward_flops_per_token_match_the_closed_form():
    assert flops.encoder_flops_per_token(512) == _per_token(12, 768, 3072, 512)


@pytest.mark.parametrize("length", [1, 16, 100])
def test_a_small_encoder_counts_its_attention_per_length(length):
    shape = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=80)
    assert flops.encoder_flops_per_token(length, **shape) == _per_token(2, 32, 80, length)


@pytest.mark.parametrize("length", [0, 513, 2.0])
def test_encoder_length_is_checked(length):
    with pytest.raises(ValueError, match="length"):
        flops.encoder_flops_per_token(length)


def test_attention_on_the_cpu_counts_as_on_the_gpu():
    """SDPA's CPU kernel counts 0 in torch's FLOP counter until taught: then its two products
    (2 * 2 * B * H * T * T * D forward; 2.5x that backward, torch's formula), under vmap too."""
    from torch.utils.flop_counter import FlopCounterMode
    import torch
    q = torch.randn(2, 3, 16, 8, requires_grad=True)
    mask = torch.zeros(16, 16)

    def counted(fn) -> int:
        with FlopCounterMode(display=False) as counter:
            fn()
        return counter.get_total_flops()

    attend = lambda x: torch.nn.functional.scaled_dot_product_attention(x, x, x, attn_mask=mask)  # noqa: E731
    count_cpu_attention()
    count_cpu_attention()                                          # idempotent
    forward = 4 * 2 * 3 * 16 * 16 * 8
    assert counted(lambda: attend(q)) == forward
    assert counted(lambda: attend(q).sum().backward()) == forward + 2.5 * forward
    assert counted(lambda: torch.vmap(attend)(q.detach()[None].repeat(2, 1, 1, 1, 1))) == \
        2 * forward


@dataclasses.dataclass
class _S:
    seeds: tuple = (0, 1, 2)


def _inputs(monkeypatch, verdict="inconclusive"):
    monkeypatch.setattr(page.planned, "steps", lambda name, s: 100)
    monkeypatch.setattr(page.planned, "examples",
                        lambda name, s: {"ViT": 6400, "Probe": 0} if name == "vit.run" else {})
    monkeypatch.setattr(page.planned, "encoded",
                        lambda name, s: (1000, 512) if name == "text.run" else (0, 0))
    vit = {"flops": 3_000, "steps": 2, "examples": 10}
    counts = {"experiments": {"vit.run": {**vit, "models": {"ViT": vit}},
                              "text.run": {"flops": 0, "steps": 0, "examples": 0, "models": {}}},
              "encoder": {"flops_per_token": 2_000}, "torch": "2.13.0"}
    settings = {"vit.run": _S(), "text.run": _S((0,))}
    chapters = {"vits": ["vit.run"], "texts": ["text.run"], "theory": []}
    claims = [{"id": "L6", "chapter": "vits", "verdict": verdict, "our_value": "+0.35 points",
               "verdict_from": "reference"},
              {"id": "D14", "chapter": "texts", "verdict": "not reproduced", "our_value": "x"}]
    decisions = {"L6": {"tests": [{"statistic": "all - none", "binding": True, "n_seeds": 22,
                                   "sesoi": 0.004, "seeds_needed": 78}]}}
    return counts, settings, chapters, claims, decisions


def test_costs_are_flops_per_example_times_examples_plus_encoded_tokens(monkeypatch):
    counts, settings, *_ = _inputs(monkeypatch)
    vit, text = page.experiment_costs(counts, settings)
    assert vit.flops_per_example == 300 and vit.training_flops == 300 * 6400
    assert vit.steps == 100 and vit.examples == 6400
    assert text.flops_per_example is None and text.training_flops == 0
    assert text.encoded_tokens == 512_000
    with pytest.raises(KeyError, match="no FLOP count"):
        page.experiment_costs(counts, {"other.run": _S()})
    counts["experiments"]["vit.run"]["models"] = {"Probe": vit}
    with pytest.raises(KeyError, match="model 'ViT' trains"):
        page.experiment_costs(counts, settings)


def test_hours_are_flops_over_peak_times_utilisation():
    gpu = page.Gpu("g", 1e12, 0.25)
    assert gpu.hours(0.25e12 * 3600 * 2) == pytest.approx(2.0)


def test_the_page_adds_each_chapters_experiments_and_says_what_undecided_claims_need(monkeypatch):
    text = page.render(*_inputs(monkeypatch), gpu=page.Gpu("g", 1e12, 0.5))
    vit_flops, text_flops = 300 * 6400, 512_000 * 2_000
    assert f"{vit_flops / 1e6:.3g} MFLOP" in text and f"{text_flops / 1e9:.3g} GFLOP" in text
    assert "| `vit.run` | 300 FLOP | 100 | 6,400 | 0 |" in text
    assert "| {doc}`vits <../notebooks/vits>` | L6 | `vit.run` | 6,400 |" in text
    assert "theory" not in text.split("### Per experiment")[0].split("| Chapter")[1]
    assert "**L6**" in text and "about 78" in text and "22 seeds" in text
    assert "runs 3 seeds" in text and "D14" not in text.split("undecided verdict needs")[1]
    decided = page.render(*_inputs(monkeypatch, verdict="reproduced"))
    assert "No claim of the ledger is `inconclusive`." in decided


def test_the_committed_page_is_current():
    assert page.current_page() == (page.repo_root() / page.PAGE).read_text(encoding="utf-8"), \
        "book/runbook.md is out of date: python -m ddcl_theory.runbook.page"


def test_every_registry_entry_has_a_count_and_formulas():
    from ddcl_theory.experiments.registry import entries
    from ddcl_theory.runbook import steps
    names = {e.name for e in entries()}
    assert set(flops.read()["experiments"]) == names
    assert set(steps.STEPS) == set(steps.EXAMPLES) == names


def test_the_measured_section_reports_each_recipe_and_the_trained_entry_s_hours():
    cost = page.ExperimentCost("laplacian_lm.run", steps=3600, examples=36_000,
                               training_flops=36_000 * 2e9, encoded_tokens=0)
    measured = {"device_name": "GPU X", "date": "2026-01-01", "torch": "2.0", "cuda": "12",
                "transformers": "5", "steps": 5, "recipes": [
                    {"recipe": "gpt2 stacked", "shapes": "GPT-2", "batch": 8,
                     "seconds_per_step": 0.5, "examples_per_second": 250e3,
                     "peak_mib": 2048.0, "bf16": True},
                    {"recipe": "deit", "outcome": "out of memory",
                     "error": "OutOfMemoryError: a|b"}]}
    text = "\n".join(page.measured_lines(measured, [cost], page.Gpu("g", 1e15, 0.1)))
    assert "| gpt2 stacked | GPT-2 | 8 | 0.500 | 250,000 | 2.0 GiB |" in text
    assert "| deit | out of memory: OutOfMemoryError: a\\|b |" in text
    assert "GPU X (2026-01-01; torch 2.0, CUDA 12, transformers 5)" in text     # not all bf16
    # 2 GFLOP an example at 250k examples a second: 500 TFLOP/s, half of a 1 PFLOP/s peak;
    # 3,600 steps at 0.5 s: half an hour
    assert "reached 500 TFLOP/s, 50% of the peak (the table above assumes 10%)" in text
    assert "take about 0.5 GPU hours" in text
    assert "No measurement is committed" in "\n".join(page.measured_lines(None, [cost]))
