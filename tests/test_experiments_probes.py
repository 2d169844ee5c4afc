

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


def test_validation_split_holds_every_class_on_both_sides_of_tiny_draws():
    import numpy as np
    import pytest
    from ddcl_theory.experiments.probes import validation_split
    y = np.repeat(np.arange(20), 3)                  # 60 rows, 20 classes: 20% would be 12
    tr, va = validation_split(y, 0.2, seed=0)
    assert set(y[va]) == set(range(20)) and set(y[tr]) == set(range(20))
    big = np.repeat(np.arange(4), 50)
    tr, va = validation_split(big, 0.2, seed=0)       # ordinary draws: sklearn's own 20%
    assert len(va) == 40 and len(tr) == 160
    with pytest.raises(ValueError, match="y:"):
        validation_split(np.arange(20), 0.2, seed=0)
