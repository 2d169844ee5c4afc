"""Decision of the chapter ``laplacian_readout``: claim X2 (ours), a DDCL readout on a Laplacian
encoder.

:func:`decide_x2` reads a readout sweep (``settings`` with the ViT's in ``settings.vit``,
``source`` and ``summary(field) -> {setting: (mean, std)}``) and compares the two encoders on
each of :data:`MEASURES`, a difference counting only beyond the seed spread
(:func:`ddcl_theory.ledger.decisions.laplacian_experiments.compare`).
"""
from __future__ import annotations

from ddcl_theory.ledger.decisions.laplacian_experiments import SPREAD_RULE, compare
from ddcl_theory.ledger.tolerance import Tolerance
from ddcl_theory.ledger.verdict import Verdict

__all__ = ["MEASURES", "TRAINING", "decide_x2"]

#: (field, name, larger is better) compared between the two encoders.
MEASURES = (("fraction_used", "bank usage", True), ("perplexity", "bank perplexity", True),
            ("separation_min", "separation S_min", True), ("test_acc", "test accuracy", True))

#: How far the numbers quoted by X2 may move between machines.
TRAINING = Tolerance(abs=0.05, rel=0.3, reason="seed means of short ViT trainings")


def decide_x2(sweep, a: str = "all", b: str = "0") -> Verdict:
    """X2: does the Laplacian encoder (setting ``a``) help the DDCL readout against ``b``?

    Each of :data:`MEASURES` is compared with :func:`compare` (a difference beyond the hypot of
    the seed spreads counts). ``confirmed`` when some measure is clearly better with Laplacian
    heads and none clearly worse; ``refuted`` when some is clearly worse and none clearly
    better; ``qualified`` when the measures disagree; ``not reproduced`` when none differs
    beyond the spread (the conjectured help does not show at this scale).
    ``numbers["signs"]`` holds ``{measure name: +1 better, -1 worse, 0 no difference}``.
    """
    signs = {}
    for field, name, larger_better in MEASURES:
        c = compare(sweep.summary(field), a, b)
        signs[name] = c if larger_better else -c
    helps = [k for k, v in signs.items() if v > 0]
    hurts = [k for k, v in signs.items() if v < 0]
    word = ("confirmed" if helps and not hurts else "refuted" if hurts and not helps
            else "qualified" if helps and hurts else "not reproduced")
    st, vit = sweep.settings, sweep.settings.vit

    def fmt(field: str) -> str:
        sm = sweep.summary(field)
        return f"{sm[a][0]:.3g} +- {sm[a][1]:.2g} vs {sm[b][0]:.3g} +- {sm[b][1]:.2g}"

    within = sweep.summary("within_seq")
    evidence = (
        f"ViT (d={vit.dim}, {vit.depth} layers, {vit.heads} heads) + DDCL readout (K = "
        f"{st.num_prototypes}, {st.ddcl_heads} heads, tau = {st.temperature:g}, beta = "
        f"{st.beta:g}) on {vit.n_train} {sweep.source} images, {vit.epochs} epochs, "
        f"{len(vit.seeds)} seeds; all heads Laplacian vs none. Within-sequence share of the "
        f"tokens reaching the readout {within[a][0]:.3g} vs {within[b][0]:.3g}. "
        + "; ".join(f"{name} {fmt(field)}" for field, name, _ in MEASURES)
        + f". Better with Laplacian heads beyond the spread: {helps or 'none'}; worse: "
        f"{hurts or 'none'}.")
    acc = sweep.summary("test_acc")
    use = sweep.summary("fraction_used")
    our = (f"usage {use[a][0]:.2f} vs {use[b][0]:.2f}, accuracy {acc[a][0]:.3f} vs "
           f"{acc[b][0]:.3f} (Laplacian vs none)")
    return Verdict("X2", word, evidence, our_value=our, numbers={"signs": signs},
                   rule="confirmed: some measure better with Laplacian heads and none worse; "
                        "refuted: the reverse; qualified: both; not reproduced: neither; "
                        + SPREAD_RULE,
                   n_seeds=len(vit.seeds), tolerance=TRAINING)
