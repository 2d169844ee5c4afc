"""ddcl_theory.ledger.decisions.laplacian_readout: the X2 rule on hand-built sweeps."""
from __future__ import annotations

from types import SimpleNamespace

from ddcl_theory.ledger.decisions import laplacian_readout as dec


def sweep(better=(), worse=()):
    """Two settings, spread 0.01 everywhere; the measures named in ``better``/``worse`` differ
    clearly between the Laplacian encoder ("all") and the baseline ("0")."""
    names = {field: name for field, name, _ in dec.MEASURES}

    def summary(field):
        a = 0.6 if names.get(field) in better else 0.4 if names.get(field) in worse else 0.5
        return {"all": (a, 0.01), "0": (0.5, 0.01)}

    vit = SimpleNamespace(dim=8, depth=1, heads=2, n_train=64, epochs=2, seeds=(0, 1))
    settings = SimpleNamespace(vit=vit, num_prototypes=4, ddcl_heads=2, temperature=1.0,
                               beta=0.01)
    return SimpleNamespace(settings=settings, source="test", summary=summary)


def test_x2_words_follow_the_signs():
    assert dec.decide_x2(sweep()).word == "not reproduced"
    assert dec.decide_x2(sweep(better=["bank usage"])).word == "confirmed"
    assert dec.decide_x2(sweep(worse=["test accuracy"])).word == "refuted"
    assert dec.decide_x2(sweep(better=["bank usage"], worse=["test accuracy"])
                         ).word == "qualified"


def test_x2_reports_signs_seeds_and_tolerance():
    v = dec.decide_x2(sweep(better=["separation S_min"]))
    assert v.claim == "X2" and v.n_seeds == 2 and v.tolerance == dec.TRAINING
    assert v.numbers["signs"] == {"bank usage": 0, "bank perplexity": 0,
                                  "separation S_min": 1, "test accuracy": 0}
    assert v.evidence.startswith("ViT (d=8, 1 layers, 2 heads) + DDCL readout (K = 4, 2 heads")
    assert "Better with Laplacian heads beyond the spread: ['separation S_min']" in v.evidence
    assert v.our_value == "usage 0.50 vs 0.50, accuracy 0.500 vs 0.500 (Laplacian vs none)"
