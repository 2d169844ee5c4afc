"""The coupled model of the two-time-scale analysis (D8, D9): ddcl_theory.theory.coupled_model."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ddcl_theory.theory import coupled_model as cm


def _tiny_model(**kw) -> cm.CoupledModel:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, 3, generator=gen, dtype=torch.float64)
    y = torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    return cm.CoupledModel(x, y, **{"k": 2, "d": 2, "hidden": 3, "tau": 0.5, **kw})


def test_coupled_model_parameter_count_and_unflatten():
    model = _tiny_model()
    assert model.m == 4 and model.n == 3 * 3 + 3 + 2 * 3 + 2 + 2 + 1
    w = model.init(torch.Generator().manual_seed(1))
    parts = model.unflatten(w)
    assert parts["P"].shape == (2, 2) and parts["W1"].shape == (3, 3) and parts["c"].shape == ()
    with pytest.raises(ValueError, match="w:"):
        model.unflatten(w[:-1])


def test_coupled_model_potential_gradcheck_float64():
    model = _tiny_model()
    w = model.init(torch.Generator().manual_seed(1)).requires_grad_(True)
    assert torch.autograd.gradcheck(model.potential, (w,))


def test_shared_field_is_gradient_and_game_hessian_symmetric():
    model = _tiny_model()
    w = model.init(torch.Generator().manual_seed(1))
    g = torch.func.grad(model.potential)(w)
    torch.testing.assert_close(model.field(w, "shared"), g)
    shared = model.game_hessian(w, "shared").full()
    np.testing.assert_allclose(shared, shared.T, atol=1e-10)
    split = model.game_hessian(w, "split").full()
    assert np.max(np.abs(split - split.T)) > 1e-6        # two objectives: not a Hessian
    np.testing.assert_allclose(split[model.m:], shared[model.m:], atol=1e-12)  # same encoder rows


def test_split_field_prototype_rows_are_grad_of_lam_lq():
    model = _tiny_model(lam=0.7)
    w = model.init(torch.Generator().manual_seed(2))
    lq_grad = torch.func.grad(lambda v: model.lam * model.terms(v)[1])(w)
    torch.testing.assert_close(model.field(w, "split")[: model.m], lq_grad[: model.m])
    with pytest.raises(ValueError, match="objective"):
        model.field(w, "other")


@pytest.mark.parametrize("objective", ["shared", "split"])
def test_find_equilibrium_reaches_zero_field(objective):
    model = _tiny_model(wd=0.1)
    w0 = model.init(torch.Generator().manual_seed(0))
    eq = cm.find_equilibrium(model, w0, objective, eps=0.5, step=0.3, flow_steps=300)
    assert eq.residual < 1e-9
    assert float(model.field(eq.w, objective).norm()) < 1e-9


def test_coupled_model_validates_arguments():
    x = torch.zeros(2, 3, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="y:"):
        cm.CoupledModel(x, torch.zeros(3))
    with pytest.raises(ValueError, match="x:"):
        cm.CoupledModel(torch.zeros(2, 4), torch.zeros(2))
    with pytest.raises(ValueError, match="tau"):
        cm.CoupledModel(x, torch.zeros(2), tau=0.0)
