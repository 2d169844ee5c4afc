"""One experiment of the registry trained data parallel on several GPUs, under ``torchrun``.

    DDCL_PROFILE=paper torchrun --nproc_per_node=8 -m ddcl_theory.experiments.launch laplacian_lm.run
    make paper                     # then the chapter reads the finished units back

Every rank runs the experiment's ``run`` on the active profile's settings; its training steps
split every batch across the ranks (:mod:`ddcl_theory.runtime.data_parallel`), and rank 0
writes the run directory. The chapter, executed afterwards in one process with the same
settings, finds every unit finished and reads it back instead of training. A run stopped part
way resumes from the run directory, under ``torchrun`` or in one process.

Only the experiments whose training loops split their batches are accepted
(:data:`DATA_PARALLEL`); the others would train the same thing on every rank. The backend is
NCCL on CUDA and gloo on the CPU (``--backend`` chooses).
"""
from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from ddcl_theory.experiments.registry import entries
from ddcl_theory.runtime import profile
from ddcl_theory.runtime.data_parallel import is_main, world

__all__ = ["DATA_PARALLEL", "main"]

#: Registry entries whose training steps split each batch across the ranks.
DATA_PARALLEL = ("laplacian_lm.run",)
#: How long a rank waits at a collective: rank 0 measures alone between rounds (minutes of a
#: language model's evaluation) while the others wait.
COLLECTIVE_TIMEOUT = timedelta(hours=1)


def main(argv: list[str] | None = None) -> int:
    """Parse ``NAME [--backend B]``, join the process group torchrun describes, run the entry."""
    ap = argparse.ArgumentParser(
        prog="torchrun --nproc_per_node=N -m ddcl_theory.experiments.launch",
        description="Run one experiment data parallel across torchrun's ranks.")
    ap.add_argument("name", help=f"the registry entry, one of {', '.join(DATA_PARALLEL)}")
    ap.add_argument("--backend", choices=("gloo", "nccl"))
    args = ap.parse_args(argv)
    if args.name not in DATA_PARALLEL:
        ap.error(f"name: expected one of {', '.join(DATA_PARALLEL)} (the experiments whose "
                 f"training is data parallel), got {args.name!r}")
    if "RANK" not in os.environ:
        ap.error("run me under torchrun (it sets RANK, WORLD_SIZE, MASTER_ADDR, ...)")
    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    profile.configure_torch()               # as a chapter does: the device check, TF32 on CUDA
    dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT)
    try:
        entry = next(e for e in entries() if e.name == args.name)
        settings = entry.make_settings()
        rank, size = world()
        if getattr(settings, "workers", 1) > 1:
            raise SystemExit(f"{entry.name}: the active profile trains in {settings.workers} "
                             "worker processes; under torchrun use a profile with one "
                             "(DDCL_PROFILE=paper)")
        batch = getattr(settings, "batch_size", None)
        if batch is not None and batch % size:
            raise SystemExit(f"{entry.name}: batch_size={batch} does not split into {size} "
                             "equal shares; run a number of ranks that divides it")
        if is_main():
            print(f"{entry.name}: {size} rank(s), backend {backend}", flush=True)
        entry.run_function()(settings)
        if is_main():
            print(f"{entry.name}: done; the chapter reads its finished units back", flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
