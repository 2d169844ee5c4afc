

def test_cv_probe_uses_no_more_folds_than_the_rarest_class_and_names_too_rare_labels():
    import pytest
    import torch
    from ddcl_theory.experiments.probes import linear_probe_cv
    gen = torch.Generator().manual_seed(0)
    f = torch.randn(12, 3, generator=gen)
    y = torch.tensor([0] * 9 + [1] * 3)              # 3 of class 1 < 5 folds
    f[y == 1] += 4.0
    log = linear_probe_cv(f, y, f, y, folds=5)
    assert log.train_acc == 1.0
    with pytest.raises(ValueError, match="y_train"):
        linear_probe_cv(f, torch.tensor([0] * 11 + [1]), f, y)
