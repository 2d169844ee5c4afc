"""What the benchmark runs: :class:`BenchSettings` and its two standard modes."""
from __future__ import annotations

from dataclasses import dataclass

from ddcl_theory.runtime import profile
from ddcl_theory.runtime.validate import check_positive_int

__all__ = ["METHODS", "QUICK_SEQ_LENS", "FULL_SEQ_LENS", "BenchSettings"]

METHODS = ("ddcl", "bare", "sdpa", "mean", "vq")
QUICK_SEQ_LENS = (256, 1024)
FULL_SEQ_LENS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
_QUADRATIC = {"sdpa"}


@dataclass(frozen=True)
class BenchSettings:
    """What the benchmark runs; :meth:`quick` and :meth:`full` are the two standard modes."""

    mode: str = "quick"
    seq_lens: tuple[int, ...] = QUICK_SEQ_LENS
    methods: tuple[str, ...] = METHODS
    dim: int = 256
    heads: int = 4
    num_prototypes: int = 64
    batch: int = 1
    repeats: int = 3
    threads: int = 1
    max_call_s: float = 20.0
    memory: bool = True
    memory_seq_lens: tuple[int, ...] | None = (1024,)   # None: every length of seq_lens
    memory_methods: tuple[str, ...] = ("ddcl", "sdpa")
    laplacian_seq_len: int = 512
    laplacian_repeats: int = 7
    compile: bool = False
    compile_seq_lens: tuple[int, ...] = (1024,)
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("dim", "heads", "num_prototypes", "batch", "repeats", "threads",
                     "laplacian_seq_len", "laplacian_repeats"):
            check_positive_int(getattr(self, name), name)
        if self.dim % self.heads:
            raise ValueError(f"dim: expected a multiple of heads={self.heads}, got {self.dim}")
        for name in ("seq_lens", "compile_seq_lens"):
            lens = getattr(self, name)
            if any(isinstance(t, bool) or not isinstance(t, int) or t < 1 for t in lens):
                raise ValueError(f"{name}: expected positive ints, got {lens!r}")
        unknown = [m for m in (*self.methods, *self.memory_methods) if m not in METHODS]
        if unknown:
            raise ValueError(f"methods: unknown {unknown}; expected some of {METHODS}")
        if not self.max_call_s > 0:
            raise ValueError(f"max_call_s: expected a positive number, got {self.max_call_s!r}")

    @classmethod
    def quick(cls, **overrides) -> "BenchSettings":
        """CI mode: T in (256, 1024), 3 repeats, memory of ddcl and sdpa at T = 1024, no compile."""
        return cls(**{"mode": "quick", **overrides})

    @classmethod
    def full(cls, **overrides) -> "BenchSettings":
        """The book's sweep: T = 256 ... 65536, memory of every method at every length, compile.

        A call predicted to take over 30 s is skipped (on one CPU thread: SDPA from T = 32768).
        """
        base = dict(mode="full", seq_lens=FULL_SEQ_LENS, repeats=5, max_call_s=30.0,
                    memory_seq_lens=None, memory_methods=METHODS, laplacian_seq_len=2048,
                    laplacian_repeats=9, compile=True, compile_seq_lens=(4096, 16384))
        return cls(**{**base, **overrides})

    @classmethod
    def from_profile(cls) -> "BenchSettings":
        """quick under the cpu profile, full under paper."""
        return profile.current().pick(cpu=cls.quick(), paper=cls.full())

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads
