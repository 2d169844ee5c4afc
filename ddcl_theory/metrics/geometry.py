"""Geometry metrics for token representations (standard definitions).

All functions take NumPy arrays or torch tensors, compute in float64 and return plain Python
floats (or small frozen dataclasses of floats). Shapes use ``N`` sequences (or samples), ``T``
tokens per sequence, ``d`` features, ``C`` classes.

* :func:`anova_split` - total variance of token representations = within-sequence +
  between-sequence, and between-sequence = within-class + between-class of the sequence means
  (the split used by Zhang & Papyan 2026 for Laplacian heads).
* :func:`neural_collapse` - NC1, equinorm and equiangularity of class means (Papyan, Han &
  Donoho 2020).
* :func:`k99` - number of principal components that hold 99% of the variance.
* :func:`cdnv` - class-distance normalised variance, averaged over class pairs (Galanti et al.
  2022; used for next-token classes by Wu & Papyan 2024, "Linguistic Collapse").

Clustering scores (Hungarian ACC, purity, NMI, ARI) live in :mod:`ddcl_theory.metrics.clustering`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ddcl_theory.runtime.validate import as_float64

__all__ = [
    "AnovaSplit",
    "NeuralCollapse",
    "anova_split",
    "neural_collapse",
    "explained_variance_ratios",
    "k99",
    "cdnv",
    "sign_balance",
]


def _as_float64(x, name: str, ndim: int) -> np.ndarray:
    """``x`` as a finite float64 array with ``ndim`` dimensions; ValueError naming ``name``."""
    return as_float64(x, name, ndim, finite=True)


def _as_labels(y, name: str, n: int) -> np.ndarray:
    if hasattr(y, "detach"):
        y = y.detach().cpu().numpy()
    arr = np.asarray(y)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name}: expected shape ({n},), got {arr.shape}")
    return arr


# --------------------------------------------------------------------------------------------
# ANOVA of token representations
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AnovaSplit:
    """Variance of token representations, per token (traces of covariance matrices).

    ``total = within_sequence + between_sequence`` and, when labels are given,
    ``between_sequence = within_class + between_class``.
    """

    total: float
    within_sequence: float
    between_sequence: float
    within_class: float | None = None
    between_class: float | None = None

    def fractions(self) -> dict[str, float]:
        """Each part divided by ``total`` (scale-free; 0 when the total is 0)."""
        scale = self.total if self.total > 0 else 1.0
        parts = {"within_sequence": self.within_sequence,
                 "between_sequence": self.between_sequence,
                 "within_class": self.within_class, "between_class": self.between_class}
        return {k: v / scale for k, v in parts.items() if v is not None}


def anova_split(tokens, labels=None) -> AnovaSplit:
    """Split the variance of token representations into within- and between-sequence parts.

    With ``h_{nt}`` the representation of token ``t`` of sequence ``n``, the sequence mean
    ``m_n = (1/T) sum_t h_{nt}`` and the grand mean ``g``::

        total            = 1/(NT) sum_{n,t} ||h_{nt} - g||^2
        within_sequence  = 1/(NT) sum_{n,t} ||h_{nt} - m_n||^2
        between_sequence = 1/N    sum_n     ||m_n - g||^2

    and, with class labels ``c(n)`` and class means of sequence means ``mu_c``::

        within_class  = 1/N sum_n ||m_n - mu_{c(n)}||^2
        between_class = 1/N sum_n ||mu_{c(n)} - g||^2

    Both splits are exact (the cross terms vanish; law of total variance), see the tests.

    Args:
        tokens: (N, T, d) token representations, every sequence of the same length ``T``.
        labels: optional (N,) class label of each sequence.

    Returns:
        :class:`AnovaSplit` (class parts ``None`` without labels).
    """
    h = _as_float64(tokens, "tokens", 3)
    n, t, _ = h.shape
    if n < 1 or t < 1:
        raise ValueError(f"tokens: expected at least one sequence and one token, got {h.shape}")
    seq_means = h.mean(axis=1)                                   # (N, d)
    grand = seq_means.mean(axis=0)                                # (d,)
    total = float(((h - grand) ** 2).sum(axis=-1).mean())
    within_seq = float(((h - seq_means[:, None, :]) ** 2).sum(axis=-1).mean())
    between_seq = float(((seq_means - grand) ** 2).sum(axis=-1).mean())
    if labels is None:
        return AnovaSplit(total, within_seq, between_seq)
    y = _as_labels(labels, "labels", n)
    classes, inverse = np.unique(y, return_inverse=True)
    class_means = np.stack([seq_means[inverse == k].mean(axis=0) for k in range(len(classes))])
    within_cls = float(((seq_means - class_means[inverse]) ** 2).sum(axis=-1).mean())
    between_cls = float(((class_means[inverse] - grand) ** 2).sum(axis=-1).mean())
    return AnovaSplit(total, within_seq, between_seq, within_cls, between_cls)


# --------------------------------------------------------------------------------------------
# Neural Collapse
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NeuralCollapse:
    """Neural Collapse metrics of features grouped by class (Papyan, Han & Donoho 2020).

    Attributes:
        nc1: ``tr(Sigma_W Sigma_B^+) / C`` (0 at collapse; smaller is stronger collapse).
        equinorm: std / mean of the norms of the centred class means (0 for a simplex ETF).
        cos_mean: mean pairwise cosine of the centred class means.
        cos_std: std of those cosines (0 when equiangular).
        etf_cos: the simplex ETF value ``-1/(C-1)``.
        etf_gap: mean ``|cos + 1/(C-1)|`` (0 for a simplex ETF).
        num_classes: ``C``.
    """

    nc1: float
    equinorm: float
    cos_mean: float
    cos_std: float
    etf_cos: float
    etf_gap: float
    num_classes: int


def neural_collapse(features, labels, *, rcond: float = 1e-10) -> NeuralCollapse:
    """Neural Collapse metrics NC1, equinorm and equiangularity on (N, d) features.

    Class means ``mu_c`` are centred by the global mean ``mu_G``, taken as the average of the
    class means (equal to the sample mean for balanced classes, as in Papyan et al. 2020; with
    this choice a simplex ETF of class means gives exactly ``cos = -1/(C-1)`` for any class
    sizes). ``Sigma_W = 1/N sum_i (h_i - mu_{c_i})(h_i - mu_{c_i})^T`` and
    ``Sigma_B = 1/C sum_c (mu_c - mu_G)(mu_c - mu_G)^T``; the pseudo-inverse uses ``rcond``.

    Args:
        features: (N, d) features, e.g. sequence means of token representations.
        labels: (N,) class labels; at least two classes.

    Returns:
        :class:`NeuralCollapse`.
    """
    h = _as_float64(features, "features", 2)
    y = _as_labels(labels, "labels", h.shape[0])
    classes, inverse = np.unique(y, return_inverse=True)
    c = len(classes)
    if c < 2:
        raise ValueError(f"labels: need at least two classes, got {c}")
    means = np.stack([h[inverse == k].mean(axis=0) for k in range(c)])   # (C, d)
    centred_means = means - means.mean(axis=0)
    resid = h - means[inverse]
    sigma_w = resid.T @ resid / h.shape[0]
    sigma_b = centred_means.T @ centred_means / c
    nc1 = float(np.trace(sigma_w @ np.linalg.pinv(sigma_b, rcond=rcond, hermitian=True)) / c)
    norms = np.linalg.norm(centred_means, axis=1)
    equinorm = float(norms.std() / norms.mean()) if norms.mean() > 0 else float("nan")
    unit = centred_means / np.where(norms > 0, norms, 1.0)[:, None]
    cos = (unit @ unit.T)[np.triu_indices(c, k=1)]
    etf = -1.0 / (c - 1)
    return NeuralCollapse(nc1=nc1, equinorm=equinorm, cos_mean=float(cos.mean()),
                          cos_std=float(cos.std()), etf_cos=etf,
                          etf_gap=float(np.abs(cos - etf).mean()), num_classes=c)


# --------------------------------------------------------------------------------------------
# Spectral decay
# --------------------------------------------------------------------------------------------

def explained_variance_ratios(features) -> np.ndarray:
    """Fractions of variance along the principal components of (N, d) features, descending."""
    h = _as_float64(features, "features", 2)
    centred = h - h.mean(axis=0)
    if h.shape[0] >= h.shape[1]:
        # eigenvalues of the (d, d) scatter matrix: cheaper than an SVD of (N, d) for N >> d
        var = np.clip(np.linalg.eigvalsh(centred.T @ centred)[::-1], 0.0, None)
    else:
        var = np.linalg.svd(centred, compute_uv=False) ** 2
    total = var.sum()
    if total <= 0:
        return np.zeros_like(var)
    return var / total


def k99(features, threshold: float = 0.99) -> int:
    """Number of principal components needed to explain ``threshold`` of the variance.

    The smallest ``k`` with ``sum_{i<=k} lambda_i / sum_i lambda_i >= threshold`` for the
    eigenvalues ``lambda_1 >= lambda_2 >= ...`` of the covariance of the (N, d) features (for
    token representations, reshape (B, T, d) to (B*T, d)). Data of rank ``r`` gives ``k <= r``;
    constant data gives 0.
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold: expected a value in (0, 1], got {threshold}")
    ratios = explained_variance_ratios(features)
    if ratios.sum() == 0:
        return 0
    cumulative = np.cumsum(ratios)
    return int(np.searchsorted(cumulative, threshold - 1e-12) + 1)


# --------------------------------------------------------------------------------------------
# CDNV
# --------------------------------------------------------------------------------------------

def cdnv(features, labels, *, min_count: int = 2) -> float:
    """Class-distance normalised variance, averaged over all pairs of classes.

    For classes ``c != c'`` with means ``mu_c`` and variances
    ``var_c = mean_{i in c} ||h_i - mu_c||^2``::

        CDNV(c, c') = (var_c + var_c') / (2 ||mu_c - mu_c'||^2)

    Smaller values mean more separable classes (0 at collapse). For a language model the classes
    are the next tokens (Wu & Papyan 2024). Classes with fewer than ``min_count`` samples are
    left out.

    Args:
        features: (N, d) features.
        labels: (N,) class labels.
        min_count: smallest class size kept (>= 1).

    Returns:
        The mean CDNV over the pairs of kept classes; ValueError when fewer than two are kept.
    """
    if min_count < 1:
        raise ValueError(f"min_count: expected >= 1, got {min_count}")
    h = _as_float64(features, "features", 2)
    y = _as_labels(labels, "labels", h.shape[0])
    classes, inverse, counts = np.unique(y, return_inverse=True, return_counts=True)
    keep = np.flatnonzero(counts >= min_count)
    if len(keep) < 2:
        raise ValueError(f"labels: need two classes with >= {min_count} samples, got {len(keep)}")
    means = np.stack([h[inverse == k].mean(axis=0) for k in keep])
    var = np.array([((h[inverse == k] - means[j]) ** 2).sum(axis=1).mean()
                    for j, k in enumerate(keep)])
    sq = (means ** 2).sum(axis=1)
    dist2 = np.maximum(sq[:, None] + sq[None, :] - 2 * means @ means.T, 0.0)
    iu = np.triu_indices(len(keep), k=1)
    d2 = dist2[iu]
    if np.any(d2 <= 0):
        raise ValueError("features: two classes have the same mean; CDNV is infinite")
    return float(((var[:, None] + var[None, :])[iu] / (2.0 * d2)).mean())


# --------------------------------------------------------------------------------------------
# Sign of a learned linear map
# --------------------------------------------------------------------------------------------

def sign_balance(matrix) -> float:
    """``tr(S) / sum_i |lambda_i(S)|`` for the symmetric part ``S = (M + M^T)/2`` of a (d, d) map.

    In ``[-1, 1]``: -1 when ``S`` is negative semidefinite, +1 when positive semidefinite, near 0
    when its positive and negative eigenvalues balance. For a Laplacian head's value-output map
    ``M`` (residual update ``(I - P) X M``), -1 means pure diffusion and +1 pure sharpening along
    the sequence. A zero matrix gives 0.
    """
    m = _as_float64(matrix, "matrix", 2)
    if m.shape[0] != m.shape[1]:
        raise ValueError(f"matrix: expected a square matrix, got shape {m.shape}")
    ev = np.linalg.eigvalsh((m + m.T) / 2)
    scale = np.abs(ev).sum()
    return float(ev.sum() / scale) if scale > 0 else 0.0
