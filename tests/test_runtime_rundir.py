"""Runs a researcher can trust (ddcl_theory.runtime: io, provenance, precision, rng, rundir):
atomic files, provenance without paths or host names, checkpoints that resume a loop to exactly
the numbers of an uninterrupted one, also after a SIGKILL, and bf16 autocast only on CUDA in the
paper profile."""
from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ddcl_theory.runtime import profile
from ddcl_theory.runtime.io import atomic_torch_save, atomic_write_bytes, read_json, write_json
from ddcl_theory.runtime.precision import (AMP_ENV, COMPILE_ENV, amp_enabled, autocast,
                                            maybe_compile)
from ddcl_theory.runtime.provenance import provenance, same_provenance, settings_hash
from ddcl_theory.runtime.rundir import _OPENED, PROVENANCE_NAME, RESUME_ENV, RunDir

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Tiny:
    steps: int = 12
    lr: float = 0.05
    seed: int = 3
    where: Path = Path("/somewhere/private/data.npz")


# ---------------------------------------------------------------------------- atomic files

def test_write_json_round_trips_sorted_with_final_newline(tmp_path):
    path = write_json(tmp_path / "sub" / "a.json", {"b": (1, 2), "a": np.float64(0.5)})
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n") and text.index('"a"') < text.index('"b"')
    assert read_json(path) == {"a": 0.5, "b": [1, 2]}


def test_atomic_write_keeps_the_old_content_when_the_write_fails(tmp_path, monkeypatch):
    path = tmp_path / "result.json"
    write_json(path, {"version": 1})

    def broken_replace(src, dst):
        raise OSError("disk went away")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk went away"):
        write_json(path, {"version": 2})
    assert read_json(path) == {"version": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]   # no temporary left


def test_atomic_torch_save_round_trips_and_a_failed_save_keeps_the_old_file(tmp_path):
    path = tmp_path / "state.ckpt"
    atomic_torch_save(path, {"w": torch.arange(3.0)})
    assert torch.equal(torch.load(path)["w"], torch.arange(3.0))
    with pytest.raises(Exception):                          # a lambda cannot be pickled
        atomic_torch_save(path, {"w": torch.zeros(2), "f": lambda: 0})
    assert torch.equal(torch.load(path)["w"], torch.arange(3.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.ckpt"]   # no temporary left


def test_atomic_write_rejects_text(tmp_path):
    with pytest.raises(ValueError, match="data"):
        atomic_write_bytes(tmp_path / "x", "not bytes")


# ---------------------------------------------------------------------------- provenance

def _strings(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)
    elif isinstance(obj, str):
        yield obj


def test_provenance_has_no_absolute_path_and_no_host_name():
    record = provenance("tiny", Tiny())
    json.dumps(record)                                          # plain JSON
    forbidden = {socket.gethostname(), str(ROOT), str(Path.home()), os.getcwd(), "/somewhere"}
    for text in _strings(record):
        assert not text.startswith("/"), text
        assert not any(f and f in text for f in forbidden), text
    assert record["settings"]["where"] == "data.npz"
    assert record["settings"]["__class__"] == "Tiny" and record["seed"] == 3
    assert record["profile"] == "cpu" and record["device"] == "cpu" and record["smoke"] is False
    assert record["torch"] == torch.__version__ and record["numpy"] == np.__version__
    assert record["settings_hash"] == settings_hash(Tiny())
    assert record["git_commit"] is None or len(record["git_commit"]) == 40


def test_provenance_names_every_seed_the_settings_run_extra_seeds_included():
    @dataclasses.dataclass(frozen=True)
    class Sweep:
        seeds: tuple = (0, 1)
        extra_seeds: tuple = (5, 6)

    assert provenance("sweep", Sweep())["seed"] == [0, 1, 5, 6]
    assert provenance("sweep", Sweep(extra_seeds=()))["seed"] == [0, 1]
    assert provenance("sweep", Sweep(), seed=9)["seed"] == 9


def test_settings_hash_changes_with_any_value_and_is_stable():
    assert settings_hash(Tiny()) == settings_hash(Tiny())
    assert settings_hash(Tiny()) != settings_hash(Tiny(steps=13))
    assert settings_hash(Tiny()) != settings_hash(Tiny(lr=0.0500001))
    with pytest.raises(ValueError, match="settings"):
        settings_hash({"steps": 12})


def test_same_provenance_ignores_only_the_time_fields():
    a = provenance("tiny", Tiny())
    b = dict(a, created_utc="2000-01-01T00:00:00+00:00")
    assert same_provenance(a, b)
    assert not same_provenance(a, dict(a, torch="0.0"))


# ---------------------------------------------------------------------------- precision, compile

def test_autocast_is_bf16_only_on_cuda_in_the_paper_profile(monkeypatch):
    monkeypatch.setenv(profile.PROFILE_ENV, "cpu")
    assert not amp_enabled("cuda") and not amp_enabled("cpu")
    with autocast("cpu"):
        y = torch.nn.Linear(4, 4)(torch.ones(2, 4))
    assert y.dtype == torch.float32 and not torch.is_autocast_enabled("cpu")
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    assert amp_enabled("cuda") and not amp_enabled("cpu")
    monkeypatch.setenv(AMP_ENV, "0")
    assert not amp_enabled("cuda")


def test_ddcl_losses_stay_float32_under_bf16_autocast():
    """The float32 island that the paper profile's bf16 autocast relies on (CPU autocast stands
    in for CUDA's): projections run in bf16, the losses in float32 with V >= 0 and
    L_q = L_OLS + V to float32 accuracy."""
    from ddcl_theory.layers.ddcl import DDCLAttention

    layer = DDCLAttention(16, num_prototypes=6, heads=2, temperature=0.5)
    x = torch.randn(3, 10, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(x)
    l = out.losses
    assert l.l_q.dtype == l.l_ols.dtype == l.v.dtype == torch.float32
    assert float(l.v.detach()) >= 0
    assert torch.allclose(l.l_q.detach(), (l.l_ols + l.v).detach(), rtol=1e-5, atol=1e-6)
    (l.l_q + out.output.float().sum()).backward()
    assert torch.isfinite(layer.prototypes.grad).all()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")   # torch's own, on importing dynamo
def test_maybe_compile_only_when_asked(monkeypatch):
    model = torch.nn.Linear(3, 1)
    monkeypatch.delenv(COMPILE_ENV, raising=False)
    assert maybe_compile(model) is model
    monkeypatch.setenv(COMPILE_ENV, "1")
    compiled = maybe_compile(model)             # lazy: nothing is compiled before a call
    assert compiled is not model and compiled._orig_mod is model
    with pytest.raises(ValueError, match="module"):
        maybe_compile(lambda x: x)


# ---------------------------------------------------------------------------- run directories

def test_run_dir_is_off_in_the_cpu_profile(tmp_path):
    ckpt = RunDir("tiny", Tiny(), root=tmp_path)
    calls = []
    assert ckpt.unit("a", lambda: calls.append(1) or 7) == 7
    assert ckpt.unit("a", lambda: calls.append(1) or 7) == 7
    assert calls == [1, 1] and not any(tmp_path.iterdir())


def test_unit_is_computed_once_then_read_back(tmp_path):
    first = RunDir("tiny", Tiny(), root=tmp_path, enabled=True)
    assert first.unit("eps=0.1,seed=0", lambda: {"acc": [0.5, 0.75]}) == {"acc": [0.5, 0.75]}
    again = RunDir("tiny", Tiny(), root=tmp_path, enabled=True)
    assert again.unit("eps=0.1,seed=0", lambda: pytest.fail("recomputed")) == {"acc": [0.5, 0.75]}
    assert again.loaded == ["eps=0.1,seed=0"] and again.units_done() == ["eps=0.1,seed=0"]
    other = RunDir("tiny", Tiny(steps=99), root=tmp_path, enabled=True)
    assert other.path != again.path and other.unit("eps=0.1,seed=0", lambda: 1) == 1
    stored = read_json(again.path / PROVENANCE_NAME)
    assert stored["settings"]["steps"] == 12 and stored["experiment"] == "tiny"


def test_run_from_other_code_is_moved_aside_not_resumed(tmp_path):
    old = RunDir("tiny", Tiny(), root=tmp_path, enabled=True)
    old.save_unit("u", 1)
    record = read_json(old.path / PROVENANCE_NAME)
    write_json(old.path / PROVENANCE_NAME, dict(record, code_sha256="0" * 16))
    _OPENED.discard(old.path.resolve())          # as if a new process opened it
    new = RunDir("tiny", Tiny(), root=tmp_path, enabled=True)
    assert new.unit("u", lambda: 2) == 2
    assert (tmp_path / f"{new.key}.replaced-1" / "units").is_dir()


def test_unit_keys_that_differ_stay_apart(tmp_path):
    ckpt = RunDir("tiny", Tiny(), root=tmp_path, enabled=True)
    ckpt.save_unit("a/b", 1)
    ckpt.save_unit("a_b", 2)
    assert ckpt.load_unit("a/b") == (True, 1) and ckpt.load_unit("a_b") == (True, 2)
    with pytest.raises(ValueError, match="key"):
        ckpt.unit_path(" ")


def _train(ckpt: RunDir | None, steps: int, stop_after: int | None = None) -> list[float]:
    """A loop drawing from every RNG (torch generator, torch global via dropout, numpy, python),
    with an optimiser and a scheduler; checkpoints after every step; resumes from a saved state."""
    gen = profile.seed_everything(11)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Dropout(0.3),
                                torch.nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.03)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
    objects = dict(modules={"model": model}, optimizers={"opt": opt},
                   schedulers={"sched": sched}, generators={"gen": gen})
    losses, first = [], 0
    if ckpt is not None and ckpt.state_path().is_file():
        # scramble what the saved state must restore: weights and every RNG
        profile.seed_everything(999)
        random.seed(999)
        torch.nn.init.normal_(model[0].weight)
        first, saved_losses = ckpt.load_state(**objects)
        losses = list(saved_losses)
    for step in range(first, steps):
        x = torch.randn(8, 4, generator=gen)
        y = x.sum(-1, keepdim=True) + 0.1 * float(np.random.normal()) + 0.01 * random.random()
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        if ckpt is not None:
            ckpt.save_state(position=step + 1, extra=losses, **objects)
        if stop_after is not None and step + 1 == stop_after:
            break
    return losses + [float(p.detach().double().sum()) for p in model.parameters()]


def test_checkpoint_round_trip_resumes_with_the_same_numbers(tmp_path):
    uninterrupted = _train(None, steps=12)
    ckpt = RunDir("loop", Tiny(), root=tmp_path, enabled=True)
    _train(ckpt, steps=12, stop_after=5)
    resumed = _train(RunDir("loop", Tiny(), root=tmp_path, enabled=True), steps=12)
    assert resumed == uninterrupted                           # exactly, every loss and weight
    assert len(set(uninterrupted[:12])) == 12                  # the loop did move


def test_load_state_names_a_missing_entry(tmp_path):
    ckpt = RunDir("loop", Tiny(), root=tmp_path, enabled=True)
    model = torch.nn.Linear(2, 2)
    ckpt.save_state(position=1, modules={"model": model})
    assert ckpt.load_state("other") is None
    with pytest.raises(ValueError, match="encoder"):
        ckpt.load_state(modules={"encoder": model})
    with pytest.raises(ValueError, match="gen"):
        ckpt.load_state(generators={"gen": torch.Generator()})


# ---------------------------------------------------------------------------- killed processes

CHILD = textwrap.dedent('''
    import json, random, sys, time
    from pathlib import Path
    import numpy as np, torch
    torch.set_num_threads(1)
    sys.path.insert(0, sys.argv[4])
    from test_runtime_rundir import Tiny, _train
    from ddcl_theory.runtime.rundir import RunDir
    root, out, pause = sys.argv[1], sys.argv[2], float(sys.argv[3])
    save = RunDir.save_state
    def slow_save(self, *args, **kwargs):
        save(self, *args, **kwargs)
        time.sleep(pause)                    # a window for the test to kill us in
    RunDir.save_state = slow_save
    ckpt = RunDir("loop", Tiny(), root=root, enabled=True)
    resumed_at = ckpt.state_path().is_file()
    Path(out).write_text(json.dumps({"numbers": _train(ckpt, steps=12), "resumed": resumed_at}))
''')


def _child_env() -> dict:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    env.pop(profile.SMOKE_ENV, None)
    env[profile.PROFILE_ENV] = "cpu"
    return env


def _start(args: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _kill_when(proc: subprocess.Popen, ready, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"child ended before {what}: {proc.stdout.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no {what} after {timeout} s")
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL


def _finish(proc: subprocess.Popen) -> None:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out


@pytest.mark.slow
def test_sigkilled_loop_resumes_to_the_uninterrupted_result(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD, encoding="utf-8")
    env, tests = _child_env(), str(Path(__file__).parent)
    _finish(_start([str(script), str(tmp_path / "a"), str(tmp_path / "a.json"), "0", tests], env))
    reference = json.loads((tmp_path / "a.json").read_text())
    assert reference["resumed"] is False

    state = RunDir("loop", Tiny(), root=tmp_path / "b", enabled=True).state_path()
    proc = _start([str(script), str(tmp_path / "b"), str(tmp_path / "b.json"), "60", tests], env)
    _kill_when(proc, state.is_file, "first checkpoint")
    assert not (tmp_path / "b.json").exists()
    _finish(_start([str(script), str(tmp_path / "b"), str(tmp_path / "b.json"), "0", tests], env))
    resumed = json.loads((tmp_path / "b.json").read_text())
    assert resumed["resumed"] is True
    assert resumed["numbers"] == reference["numbers"]


SWEEP = textwrap.dedent('''
    import dataclasses, json, sys, time
    from pathlib import Path
    import torch
    torch.set_num_threads(1)
    from ddcl_theory.runtime.rundir import RunDir
    from ddcl_theory.experiments import eps_ablation as ea
    out, pause = sys.argv[1], float(sys.argv[2])
    save, load, loaded = RunDir.save_unit, RunDir.load_unit, []
    def slow_save(self, key, value):
        save(self, key, value)
        time.sleep(pause)
    def counted_load(self, key):
        found, value = load(self, key)
        if found:
            loaded.append(key)
        return found, value
    RunDir.save_unit, RunDir.load_unit = slow_save, counted_load
    s = ea.AblationSettings(eps_values=(0.1, 1.0), seeds=(0, 1), n_train_per_class=6, n_test=20,
                            hidden=8, dim=4, num_prototypes=3, epochs=2, batch_size=8)
    result = ea.run(s)
    Path(out).write_text(json.dumps({"runs": [dataclasses.asdict(r) for r in result.runs],
                                     "loaded": loaded}))
''')


@pytest.mark.slow
def test_sigkilled_sweep_resumes_at_the_next_unfinished_run(tmp_path):
    """The eps ablation under the paper profile: killed after its first (eps, seed) run, the
    rerun reads that run back, trains the other three, and ends with the uninterrupted numbers."""
    script = tmp_path / "sweep.py"
    script.write_text(SWEEP, encoding="utf-8")
    env = dict(_child_env(), **{profile.PROFILE_ENV: "paper"})
    env_a = dict(env, DDCL_RESULTS_DIR=str(tmp_path / "a"))
    env_b = dict(env, DDCL_RESULTS_DIR=str(tmp_path / "b"))
    _finish(_start([str(script), str(tmp_path / "a.json"), "0"], env_a))
    reference = json.loads((tmp_path / "a.json").read_text())
    assert reference["loaded"] == [] and len(reference["runs"]) == 4

    units = tmp_path / "b" / "paper" / "runs"
    proc = _start([str(script), str(tmp_path / "b.json"), "60"], env_b)
    _kill_when(proc, lambda: any(units.glob("*/units/*.pt")), "first finished run")
    _finish(_start([str(script), str(tmp_path / "b.json"), "0"], env_b))
    resumed = json.loads((tmp_path / "b.json").read_text())
    assert resumed["loaded"] == ["eps=0.1,seed=0"]
    # json text, so that a NaN of a diverged run compares equal to itself
    assert json.dumps(resumed["runs"]) == json.dumps(reference["runs"])
    assert (tmp_path / "b" / "paper" / "runs").is_dir()         # paper results stay in paper/


# ---------------------------------------------------------------------------- chapters (make paper)

def test_paper_chapters_resume_at_chapter_granularity(tmp_path, monkeypatch):
    """``goldens write`` under the paper profile writes provenance beside each executed notebook
    and skips a chapter already executed with the same provenance, unless --force."""
    import nbformat

    from ddcl_theory.ledger import goldens
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")
    monkeypatch.setenv(profile.ALLOW_CPU_ENV, "1")      # this host has no GPU
    monkeypatch.setenv("DDCL_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.delenv(RESUME_ENV, raising=False)
    executed = []

    def fake_write(source, out_dir=None):              # executing a chapter is not the point
        executed.append(source.stem)
        nbformat.write(nbformat.v4.new_notebook(), out_dir / goldens.golden_path(source).name)
        return 0.0

    monkeypatch.setattr(goldens, "write", fake_write)
    out = tmp_path / "paper"
    source = goldens.sources(["decomposition"])[0]
    assert goldens.main(["write", "--out", str(out), "decomposition"]) == 0
    record = read_json(goldens.provenance_path(source, out))
    assert record["profile"] == "paper" and record["source_sha256"]
    assert not any(t.startswith("/") for t in _strings(record))
    assert goldens.main(["write", "--out", str(out), "decomposition"]) == 0          # skipped
    assert executed == [source.stem]
    write_json(goldens.provenance_path(source, out), dict(record, code_sha256="0" * 16))
    # other code: rerun
    assert goldens.main(["write", "--out", str(out), "decomposition"]) == 0
    assert goldens.main(["write", "--out", str(out), "--force", "decomposition"]) == 0
    assert executed == [source.stem] * 3 and os.environ[RESUME_ENV] == "0"


# ---------------------------------------------------------------------------- the ledger page

def test_ledger_shows_paper_profile_verdicts_beside_cpu_ones_only_when_they_exist(tmp_path,
                                                                                   monkeypatch):
    from ddcl_theory.ledger import claims
    monkeypatch.setenv("DDCL_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("DDCL_REFERENCE_DIR", str(tmp_path / "no-reference-run"))
    monkeypatch.delenv(claims.PAPER_LEDGER_ENV, raising=False)
    cpu = claims.Chapter("a")
    cpu.settle("L6", "qualified", "small ViT", our_value="+1 point")
    cpu.save(tmp_path / "verdicts")
    plain = claims.build_ledger()
    assert not claims.has_paper_profile(plain)
    assert all("paper_profile" not in row for row in plain)
    table = claims.ledger_markdown(plain)
    assert "paper scale" not in table and "paper scale" not in claims.ledger_entries_markdown(plain)

    big = claims.Chapter("a")
    big.settle("L6", "reproduced", "ViT at paper scale", our_value="+2.5 points")
    big.save(tmp_path / "paper" / "verdicts")
    ledger = claims.build_ledger()
    row = {r["id"]: r for r in ledger}
    # the verdict comes from the largest scale that ran; the cpu word and value stay beside it
    assert (row["L6"]["verdict"], row["L6"]["verdict_from"]) == ("reproduced", "paper")
    assert row["L6"]["cpu_verdict"] == "qualified" and row["L6"]["cpu_our_value"] == "+1 point"
    assert (row["L6"]["our_value"], row["L6"]["evidence"]) == ("+2.5 points",
                                                                "ViT at paper scale")
    assert row["L6"]["cpu_evidence"] == "small ViT"
    assert row["L6"]["paper_profile"]["verdict"] == "reproduced"
    assert row["L6"]["paper_profile"]["our_value"] == "+2.5 points"
    assert row["D3"]["paper_profile"] is None
    table = claims.ledger_markdown(ledger)
    rows = table.split("\n* - ")[1:]
    assert all(sum(line.startswith("  -") for line in r.split("\n")) == 5 for r in rows)
    assert "  - ours at paper scale" in table and "{verdict}`reproduced` \\+2.5 points" in table
    entries = claims.ledger_entries_markdown(ledger)
    assert "**Evidence of record (paper run).**" in entries
    assert "**cpu run (exploratory):**" in entries

    monkeypatch.setenv(claims.PAPER_LEDGER_ENV, "0")
    assert not claims.has_paper_profile(claims.build_ledger())
    monkeypatch.setenv(profile.PROFILE_ENV, "paper")            # the paper build's own ledger
    monkeypatch.delenv(claims.PAPER_LEDGER_ENV)
    assert not claims.has_paper_profile(claims.build_ledger())


# ---------------------------------------------------------------------------- experiments resume

class _Interrupted(Exception):
    pass


@pytest.fixture()
def paper_on_cpu(tmp_path, monkeypatch):
    """The paper profile on the CPU (whatever the host has), results under ``tmp_path``."""
    monkeypatch.setattr(profile, "current", lambda: profile.Profile("paper", "cpu"))
    monkeypatch.setenv("DDCL_PROGRESS", "0")
    monkeypatch.delenv(RESUME_ENV, raising=False)

    def use(name: str) -> None:
        monkeypatch.setenv("DDCL_RESULTS_DIR", str(tmp_path / name))
    return use


def _interrupt_after(monkeypatch, method: str, saves: int) -> None:
    """Make ``RunDir.<method>`` raise after its ``saves``-th call (the save itself done)."""
    original, count = getattr(RunDir, method), []

    def save_then_maybe_stop(self, *args, **kwargs):
        original(self, *args, **kwargs)
        count.append(1)
        if len(count) == saves:
            raise _Interrupted
    monkeypatch.setattr(RunDir, method, save_then_maybe_stop)


def test_interrupted_annealing_resumes_at_the_next_temperature(paper_on_cpu, monkeypatch):
    from ddcl_theory.experiments import annealing

    s = annealing.AnnealingSettings(n_tokens=300, k=4, n_temperatures=8, max_iters=200)
    paper_on_cpu("a")
    reference = annealing.run(s)
    paper_on_cpu("b")
    with monkeypatch.context() as m:
        _interrupt_after(m, "save_state", saves=3)
        with pytest.raises(_Interrupted):
            annealing.run(s)
    calls = []
    original = annealing.em_fixed_point
    monkeypatch.setattr(annealing, "em_fixed_point",
                        lambda *a, **k: calls.append(1) or original(*a, **k))
    resumed = annealing.run(s)
    assert len(calls) == 5                                   # temperatures 4..8 only
    for name in ("prototypes", "n_clusters", "separation_min", "free_energy", "settled"):
        assert np.array_equal(getattr(resumed, name), getattr(reference, name)), name


def test_interrupted_lm_study_resumes_inside_the_run(paper_on_cpu, monkeypatch):
    from ddcl_theory.experiments import laplacian_lm as lm

    s = lm.LMSettings(block_size=16, dim=8, depth=1, heads=2, laplacian_heads=1, mlp_ratio=2,
                      batch_size=4, steps=(10,), rounds=5, lr=3e-3, eval_windows=16,
                      cdnv_min_count=10, seeds=(0,), trend_seeds=1, threads=1)
    paper_on_cpu("a")
    reference = lm.run(s)
    paper_on_cpu("b")
    with monkeypatch.context() as m:
        _interrupt_after(m, "save_state", saves=3)      # in the first arm, after step 6 of 10
        with pytest.raises(_Interrupted):
            lm.run(s)
    steps = []
    original = lm.stacked_batches

    def counted(streams):
        for batch in original(streams):
            steps.append(1)
            yield batch
    monkeypatch.setattr(lm, "stacked_batches", counted)
    resumed = lm.run(s)
    assert len(steps) == 4 + 10                             # 4 left of the first arm, then 10
    for a, b in zip(resumed.runs, reference.runs, strict=True):
        assert (a.laplacian_heads, a.seed, a.val_loss, a.cdnv, a.best) == \
            (b.laplacian_heads, b.seed, b.val_loss, b.cdnv, b.best)
        np.testing.assert_array_equal(a.heldout_windows, b.heldout_windows)
