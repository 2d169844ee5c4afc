"""Small token encoders for cheap experiments."""
from __future__ import annotations

from torch import Tensor, nn


class TokenMLP(nn.Module):
    """A per-token two-layer MLP: (B, T, d_in) -> (B, T, d_out), GELU in between.

    Tokens do not interact (no attention): the encoder is the slow block theta of the
    two-time-scale analysis and the DDCL layer on top of it pools the tokens.
    """

    def __init__(self, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        for name, value in (("d_in", d_in), ("hidden", hidden), ("d_out", d_out)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, d_out))

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 3:
            raise ValueError(f"x: expected shape (B, T, d_in), got {tuple(x.shape)}")
        return self.net(x)
