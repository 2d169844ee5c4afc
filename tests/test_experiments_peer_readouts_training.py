"""Training one peer readout on the one training loop: a killed run resumes to the same numbers."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from ddcl_theory.experiments import peer_readouts as pr
from ddcl_theory.experiments.peer_readouts import training
from ddcl_theory.runtime.rundir import RunDir


@dataclass
class _Key:
    name: str = "peer-readouts-resume"


def _train(kind, run=None):
    data = pr.synthetic_tokens(40, 6, in_dim=4, seed=0)
    test = pr.synthetic_tokens(20, 6, in_dim=4, seed=1)
    s = pr.PeerSettings(num_slots=3, dim=8, hidden=8, epochs=4, batch_size=16,
                        ddcl_relative_temperature=0.1)
    return pr.train_readout(kind, data, s, test, run=run, name=f"unit-{kind}")


@pytest.mark.parametrize("kind", ["ddcl", "slot"])
def test_a_killed_readout_training_resumes_to_the_same_records(kind, tmp_path, monkeypatch):
    whole = _train(kind)
    assert [r.epoch for r in whole.records] == [0, 1, 2, 3, 4]
    measure = training.measure_readout

    def killed_after_epoch_2(model, data, test, epoch, *args, **kwargs):
        if epoch == 3:
            raise KeyboardInterrupt                     # killed during epoch 3's record
        return measure(model, data, test, epoch, *args, **kwargs)

    run = RunDir("peer-resume", _Key(), root=tmp_path, enabled=True)
    monkeypatch.setattr(training, "measure_readout", killed_after_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        _train(kind, run)
    assert run.state_path(f"unit-{kind}").is_file()
    monkeypatch.setattr(training, "measure_readout", measure)
    resumed = _train(kind, RunDir("peer-resume", _Key(), root=tmp_path, enabled=True))
    assert repr(resumed.records) == repr(whole.records)      # loss at epoch 0 is nan
    assert not run.state_path(f"unit-{kind}").exists()
