"""Small MLP models for cheap experiments: a per-token encoder and a row autoencoder with a
DDCL soft-quantiser bottleneck."""
from __future__ import annotations

from torch import Tensor, nn

from ddcl_theory.layers.ddcl import DDCLOutput
from ddcl_theory.layers.quantizers import SoftDDCLQuantizer
from ddcl_theory.runtime.validate import check_positive_int, check_shape


class TokenMLP(nn.Module):
    """A per-token two-layer MLP: (B, T, d_in) -> (B, T, d_out), GELU in between.

    Tokens do not interact (no attention): the encoder is the slow block theta of the
    two-time-scale analysis and the DDCL layer on top of it pools the tokens.
    """

    def __init__(self, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        for name, value in (("d_in", d_in), ("hidden", hidden), ("d_out", d_out)):
            check_positive_int(value, name)
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, d_out))

    def forward(self, x: Tensor) -> Tensor:
        check_shape(x, "x", ("B", "T", "d_in"))
        return self.net(x)


class QuantizedMLPAutoencoder(nn.Module):
    """Rows (N, F) -> MLP encoder (F -> hidden -> latent, ReLU) -> DDCL soft quantiser with K codes
    -> MLP decoder (latent -> hidden -> F, ReLU) applied to the soft centroids.

    The N rows are one sequence for the bank, so its loss terms are those of all rows together.
    Built in the order encoder, decoder, quantizer (the order of the random initialisation).
    """

    def __init__(self, features: int, num_codes: int, hidden: int, latent: int,
                 beta: float = 0.25) -> None:
        super().__init__()
        for name, value in (("features", features), ("num_codes", num_codes),
                            ("hidden", hidden), ("latent", latent)):
            check_positive_int(value, name)
        self.encoder = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(),
                                     nn.Linear(hidden, latent))
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(),
                                     nn.Linear(hidden, features))
        self.quantizer = SoftDDCLQuantizer(latent, num_codes, beta=beta)

    def forward(self, x: Tensor) -> tuple[Tensor, DDCLOutput]:
        """x (N, F) -> (reconstruction (N, F), the bank's output on the (1, N, latent) codes:
        assignments, centroids and loss terms)."""
        check_shape(x, "x", ("N", "F"))
        out = self.quantizer.layer(self.encoder(x)[None])
        return self.decoder(out.centroids[0, 0]), out
