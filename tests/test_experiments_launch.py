"""The torchrun entry point of data-parallel experiments (ddcl_theory.experiments.launch): it
refuses experiments that are not data parallel and a start outside torchrun, and runs an entry
with the active profile's settings inside the process group."""
from __future__ import annotations

import dataclasses
import socket

import pytest

from ddcl_theory.experiments import launch
from ddcl_theory.experiments.registry import Experiment
from ddcl_theory.runtime.data_parallel import world

CALLS: list = []


@dataclasses.dataclass(frozen=True)
class FakeSettings:
    workers: int = 1
    batch_size: int = 4

    @classmethod
    def from_profile(cls, **overrides):
        return cls(**overrides)


def fake_run(settings: FakeSettings) -> None:
    CALLS.append((settings, world()))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_only_data_parallel_experiments_are_launched(capsys):
    with pytest.raises(SystemExit):
        launch.main(["soft_vq.run"])
    assert "name: expected one of laplacian_lm.run" in capsys.readouterr().err


def test_outside_torchrun_it_says_how_to_start(monkeypatch, capsys):
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(SystemExit):
        launch.main(["laplacian_lm.run"])
    assert "run me under torchrun" in capsys.readouterr().err


@pytest.mark.parametrize("workers, world_size, error", [
    (1, 1, None), (2, 1, "trains in 2 worker processes"),
    (1, 3, "batch_size=4 does not split into 3 equal shares")])
def test_an_entry_runs_inside_the_process_group(monkeypatch, workers, world_size, error):
    entry = Experiment(__name__, "FakeSettings", "fake_run", {"workers": workers})
    monkeypatch.setattr(launch, "DATA_PARALLEL", (entry.name,))
    monkeypatch.setattr(launch, "entries", lambda: [entry])
    for key, value in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                           MASTER_PORT=str(_free_port())).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(launch, "world", lambda: (0, world_size))
    monkeypatch.setattr(launch.profile, "configure_torch", lambda: CALLS.append("configured"))
    CALLS.clear()
    if error is None:
        assert launch.main([entry.name, "--backend", "gloo"]) == 0
        assert CALLS == ["configured", (FakeSettings(workers=1), (0, 1))]
    else:
        with pytest.raises(SystemExit, match=error):
            launch.main([entry.name, "--backend", "gloo"])
        assert CALLS == ["configured"]
    assert world() == (0, 1)                       # the process group is gone afterwards
