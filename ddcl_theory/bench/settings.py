"""What the benchmark runs: :class:`BenchSettings` and its two standard modes."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddcl_theory.runtime import profile
from ddcl_theory.runtime.settings import Settings, setting

__all__ = ["METHODS", "MODES", "QUICK_SEQ_LENS", "FULL_SEQ_LENS", "BenchSettings"]

METHODS = ("ddcl", "bare", "sdpa", "mean", "vq")
#: The two standard modes: quick under the cpu profile, full under the paper profile.
MODES = ("quick", "full")
QUICK_SEQ_LENS = (256, 1024)
FULL_SEQ_LENS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
_QUADRATIC = {"sdpa"}


@dataclass(frozen=True)
class BenchSettings(Settings):
    """What the benchmark runs; :meth:`quick` (the cpu profile's values, what CI runs) and
    :meth:`full` (the paper profile's, the book's sweep) are the two standard modes."""

    mode: str = setting("quick", paper="full", choices=MODES)
    seq_lens: tuple[int, ...] = setting(QUICK_SEQ_LENS, paper=FULL_SEQ_LENS, ge=1, nonempty=True)
    methods: tuple[str, ...] = setting(METHODS, choices=METHODS, nonempty=True)
    dim: int = setting(256, ge=1)
    heads: int = setting(4, ge=1)
    num_prototypes: int = setting(64, ge=1)
    batch: int = setting(1, ge=1)
    repeats: int = setting(3, paper=5, ge=1)
    threads: int = setting(1, ge=1)
    max_call_s: float = setting(20.0, paper=30.0, gt=0)
    memory: bool = setting(True)
    # None: every length of seq_lens
    memory_seq_lens: tuple[int, ...] | None = setting((1024,), paper=None, ge=1)
    memory_methods: tuple[str, ...] = setting(("ddcl", "sdpa"), paper=METHODS, choices=METHODS)
    laplacian_seq_len: int = setting(512, paper=2048, ge=1)
    laplacian_repeats: int = setting(7, paper=9, ge=1)
    compile: bool = setting(False, paper=True)
    compile_seq_lens: tuple[int, ...] = setting((1024,), paper=(4096, 16384), ge=1)
    seed: int = setting(0, ge=0)

    def check(self) -> None:
        if self.dim % self.heads:
            raise ValueError(f"BenchSettings.dim: expected a multiple of heads={self.heads}, "
                             f"got {self.dim}")

    @classmethod
    def quick(cls, **overrides: Any) -> "BenchSettings":
        """CI mode: T in (256, 1024), 3 repeats, memory of ddcl and sdpa at T = 1024, no compile
        (the cpu profile's values)."""
        return cls.for_profile(profile.Profile("cpu", "cpu"), **overrides)

    @classmethod
    def full(cls, **overrides: Any) -> "BenchSettings":
        """The book's sweep: T = 256 ... 65536, memory of every method at every length, compile
        (the paper profile's values).

        A call predicted to take over 30 s is skipped (on one CPU thread: SDPA from T = 32768).
        """
        return cls.for_profile(profile.Profile("paper", "cpu"), **overrides)

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads
