"""Data-parallel training of the paper runs (ddcl_theory.runtime.data_parallel): two CPU
processes with the gloo backend, each training on its half of every batch, train the DeiT-style
ViT stack and the language-model stack as one process trains them on the whole batch; rank 0
alone writes the run directory; without a process group every helper is the identity."""
from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ddcl_theory.experiments import deit_recipe as dr
from ddcl_theory.experiments import laplacian_lm as lm
from ddcl_theory.experiments.laplacian_gpt import text_parts
from ddcl_theory.runtime import data_parallel as dp
from ddcl_theory.runtime.rundir import RunDir
from ddcl_theory.runtime.training import counting_flops

from _study_images import synthetic_images

WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _recipe() -> dr.DeiTRecipe:
    # float64 below, so that Adam's near-zero updates do not amplify the rounding of the
    # all-reduce; two blocks, so that stochastic depth (drawn for the whole batch) acts
    import dataclasses
    return dataclasses.replace(dr.DeiTRecipe(), image_size=8, patch=4, dim=8, depth=2, heads=2,
                               mlp_ratio=2, batch_size=16, epochs=3, warmup_epochs=1, lr=0.2,
                               crop_pad=1, drop_path=0.3, patience=2)


def _train_vit(n: int = 64) -> tuple[list[torch.nn.Module], np.ndarray, int]:
    """The stack's models, training-loss curves and the FLOPs its training steps computed, on
    ``n`` training images (batches of 16)."""
    recipe = _recipe()
    tensors = {k: v.double() if v.is_floating_point() else v
               for k, v in dr.study_pixels(synthetic_images(), n).items()}
    with counting_flops() as count:
        models, log = dr.train_deit_stack(lambda _s: recipe.model(10, 1).double(), (0, 1),
                                          recipe, tensors, 10, "cpu", epochs=3, patience=2)
    return models, log.train_loss, count["flops"]


def _train_lm(s: lm.LMSettings, run: RunDir | None = None) -> tuple[list[lm.LMRun], int]:
    """The stack's runs and the token ids its training steps read."""
    with counting_flops() as count:
        runs = lm.train_lm_stack(s, text_parts(s.val_fraction), 2, 8, (0, 1), "cpu", run)
    return runs, count["examples"]


def _lm_settings() -> lm.LMSettings:
    return lm.LMSettings(block_size=8, dim=8, depth=1, heads=4, laplacian_heads=2, batch_size=8,
                         steps=(4, 8), rounds=2, eval_windows=8, cdnv_min_count=2, seeds=(0, 1),
                         trend_seeds=1)


def _worker(rank: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    try:
        models, train_loss, flops = _train_vit()
        # 67 images: each epoch's last batch holds 3, of which the ranks train on 1 each;
        # 65: its last batch holds 1, fewer than the ranks, and is left out
        partial, _, partial_flops = _train_vit(67)
        _, _, short_flops = _train_vit(65)
        s = _lm_settings()
        run = RunDir("lm-ddp", s, root=Path(out_dir) / "runs", enabled=True)
        runs, tokens = run.unit("stack", lambda: _train_lm(s, run))
        run.finish()
        torch.save({"vit": [m.state_dict() for m in models], "vit_train_loss": train_loss,
                    "vit_flops": flops, "vit_partial": [m.state_dict() for m in partial],
                    "vit_partial_flops": partial_flops, "vit_short_flops": short_flops,
                    "lm": runs, "lm_tokens": tokens, "world": dp.world(),
                    "shard": dp.shard(torch.arange(5))}, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_without_a_process_group_each_helper_is_the_identity():
    t = torch.arange(6.0)
    module = torch.nn.Linear(2, 2)
    assert dp.world() == (0, 1) and dp.is_main()
    assert dp.shard(t) is t and dp.mean_over_ranks(t) is t
    assert dp.data_parallel(module, "cpu") is module and dp.unwrap(module) is module
    assert dp.from_main({"a": 1}) == {"a": 1}
    dp.barrier()


@pytest.mark.slow
def test_two_gloo_ranks_train_the_paper_stacks_as_one_process_does(tmp_path):
    mp.spawn(_worker, args=(_free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    assert [r["world"] for r in ranks] == [(0, 2), (1, 2)]
    assert ranks[0]["shard"].tolist() == [0, 1, 2] and ranks[1]["shard"].tolist() == [3, 4]

    # the ViT stack: each rank trained on half of every batch; the same weights as one process
    # on the whole batch (and the same on both ranks), the training loss averaged over ranks
    alone, alone_loss, alone_flops = _train_vit()
    for rank in ranks:
        assert rank["vit_flops"] * WORLD == alone_flops > 0          # half of every batch
        np.testing.assert_allclose(rank["vit_train_loss"], alone_loss, rtol=1e-9)
        for state, model in zip(rank["vit"], alone):
            for name, value in model.state_dict().items():
                assert torch.allclose(state[name], value, rtol=1e-7, atol=1e-9), name

    # a partial last batch: equal shares still (as many FLOPs on each rank), the replicas equal;
    # one image fewer than the ranks: no last step (as many FLOPs as 64 images give)
    assert ranks[0]["vit_partial_flops"] == ranks[1]["vit_partial_flops"]
    assert ranks[0]["vit_short_flops"] == ranks[0]["vit_flops"]
    for state, other in zip(ranks[0]["vit_partial"], ranks[1]["vit_partial"]):
        assert all(torch.equal(state[k], other[k]) for k in state)

    # the language-model stack (float32): rank 0 measured and every rank got its numbers
    s = _lm_settings()
    single, tokens = _train_lm(s)
    for rank in ranks:
        assert rank["lm_tokens"] * WORLD == tokens > 0
        for a, b in zip(rank["lm"], single):
            assert (a.seed, a.best, a.steps) == (b.seed, b.best, b.steps)
            for field in ("val_loss", "heldout_loss", "train_loss", "cdnv"):
                np.testing.assert_allclose(getattr(a, field), getattr(b, field), rtol=2e-4)
            np.testing.assert_allclose(a.heldout_windows, b.heldout_windows, rtol=2e-4)

    # the run directory: the unit saved once, the training state cleared, finished by rank 0
    runs = tmp_path / "runs"
    assert [p.name for p in (next(runs.iterdir()) / "units").iterdir()] == ["stack.pt"]
    assert not list(runs.glob("*/*.ckpt")) and len(list(runs.glob("*/finished.json"))) == 1
