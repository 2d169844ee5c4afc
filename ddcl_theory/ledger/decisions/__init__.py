"""The decision rules: one module per chapter, one ``decide_<claim id>`` function per claim.

Each function takes what the chapter computed (experiment results, residuals of identities,
symbolic checks) and returns a :class:`ddcl_theory.ledger.verdict.Verdict`. Modules here may
read the attributes of experiment results but never import ``ddcl_theory.experiments``: the
ledger sits beside the experiments, not above them.
"""
