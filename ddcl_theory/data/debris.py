"""A synthetic catalogue of tracked Earth-orbiting objects in four orbit classes (claim D13).

This is the book's own generator: the source's catalogue and generator are not available, so
accuracies measured on these catalogues are compared with the source's only as a scale of
effect, never as a number to match.

Deterministic by seed. Each object gets *true* orbital elements drawn from a class-specific
mixture of populations (below), its class is decided by fixed boundaries on those true elements,
and the catalogue reports *observed* elements with measurement noise.

Physics (two-body Kepler orbits):

* radii r = R_EARTH + altitude, with R_EARTH = 6378.137 km (WGS-84 equatorial radius);
* perigee and apogee radii r_p = a (1 - e), r_a = a (1 + e), so a = (r_p + r_a)/2 and
  e = (r_a - r_p)/(r_a + r_p);
* period from Kepler's third law, T = 2 pi sqrt(a^3 / mu), mu = 398600.4418 km^3/s^2;
* sun-synchronous inclination for near-circular orbits, cos i = -(a / 12352.5 km)^(7/2) (the J2
  nodal precession matching one revolution per year).

Classes (on the true elements, checked in this order; a complete partition):

=====  ===================================================================================
HEO    e > 0.25 (highly elliptical: transfer orbits, Molniya, Tundra)
LEO    apogee altitude < 2,000 km
GEO    perigee and apogee altitude both within 200 km of 35,786 km (35,586 .. 35,986 km)
MEO    everything else (e <= 0.25, apogee >= 2,000 km, not GEO); the MEO populations below lie
       at apogee altitudes 2,000 .. 35,586 km
=====  ===================================================================================

Populations (each drawn, then kept only if it falls in its class: rejection sampling, so the
class sizes are exact). Altitudes in km, angles in degrees, Exp(m) exponential with mean m,
"mean altitude" h means a = R_EARTH + h. The *boundary* populations fill the regions next to a
class boundary, as real catalogues do (rocket bodies and debris on eccentric orbits, graveyard
orbits just outside the GEO band); without them (``overlap=False``) the classes are far apart:

* LEO - sun-synchronous (35%): mean altitude U(450, 900), e ~ Exp(0.001), i from the SSO
  relation + N(0, 0.1); constellation shells (25%): 550 km at 53 deg (60%), 570 km at 70 deg
  (20%), 1,200 km at 87.9 deg (20%), altitude + N(0, 10), e ~ Exp(0.0003), i + N(0, 0.1);
  fragmentation debris (25%): mean altitude U(600, 1,500), e ~ Exp(0.01), i ~ N(82, 12);
  *boundary* eccentric (15%): perigee U(200, 700), apogee = perigee + U(0, 1,800),
  i ~ U(0, 100).
* MEO - navigation constellations (45%): GPS 20,180 km / 55 deg, GLONASS 19,130 / 64.8,
  Galileo 23,222 / 56, BeiDou 21,528 / 55 (equally likely), altitude + N(0, 30),
  e ~ Exp(0.003), i + N(0, 1); other near-circular (20%): mean altitude log-uniform(2,000,
  30,000), e ~ U(0, 0.1), i ~ U(0, 90); *boundary* eccentric (20%): perigee U(200, 2,000),
  apogee log-uniform(2,000, 20,000), i ~ U(0, 100); *boundary* near-GEO (15%): mean altitude
  35,786 +- U(200, 600) (80% above: graveyard), e ~ Exp(0.001), i ~ U(0, 15).
* GEO - station-kept (50%): altitude 35,786 + N(0, 20), e ~ Exp(0.0002), i = |N(0, 0.05)|;
  drifting (50%): altitude 35,786 + N(0, 60), e ~ Exp(0.0008), i ~ U(0, 15).
* HEO - geostationary transfer (50%): perigee U(180, 650), apogee 35,786 + N(0, 300),
  i from the launch site: 6 (40%), 28.5 (40%) or 51.6 (20%) + N(0, 1); Molniya (25%):
  a = 26,560 + N(0, 50), e ~ N(0.72, 0.02), i ~ N(63.4, 0.3); Tundra (10%): a = 42,164 +
  N(0, 50), e ~ N(0.27, 0.03), i ~ N(63.4, 1); *boundary* eccentric (15%): perigee
  U(200, 2,000), apogee log-uniform(5,000, 40,000), i ~ U(0, 100).

Every population keeps perigee altitude >= 150 km. Class shares default to LEO 70%, MEO 8%,
GEO 12%, HEO 10% (LEO dominant, as in public catalogues of tracked objects).

Measurement noise (an assumption of this generator, deliberately coarse): each observed apsis
radius is the true one times (1 + sigma_r * N(0, 1)) (sigma_r = 1%: 70 km in LEO, 420 km at
GEO), swapped if the perigee comes out above the apogee, and the inclination gets
N(0, sigma_i^2) with sigma_i = 0.5 deg (folded into [0, 180]). The observed a, e and period are
recomputed from the noisy apsides, so Kepler's law holds for the observed columns too; the labels
stay those of the true elements, so objects near a boundary can look like the neighbouring class.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "CLASSES",
    "DEFAULT_SHARES",
    "FEATURES",
    "GEO_ALTITUDE",
    "GEO_HALF_WIDTH",
    "HEO_E_MIN",
    "LEO_APOGEE_MAX",
    "MU_EARTH",
    "R_EARTH",
    "Catalogue",
    "classify",
    "elements_from_apsides",
    "generate",
    "kepler_period",
    "sso_inclination",
]

MU_EARTH = 398600.4418          # km^3 / s^2
R_EARTH = 6378.137              # km
GEO_ALTITUDE = 35786.0          # km
LEO_APOGEE_MAX = 2000.0         # km
GEO_HALF_WIDTH = 200.0          # km: GEO band 35,586 .. 35,986 km for both apsides
HEO_E_MIN = 0.25
MIN_PERIGEE = 150.0             # km
SSO_REFERENCE = 12352.5         # km: cos i = -(a / 12352.5)^(7/2) for a sun-synchronous orbit
CLASSES = ("LEO", "MEO", "GEO", "HEO")
FEATURES = ("perigee_alt_km", "apogee_alt_km", "eccentricity", "inclination_deg", "period_min")
DEFAULT_SHARES = (0.70, 0.08, 0.12, 0.10)


def kepler_period(a_km) -> np.ndarray:
    """Orbital period in minutes, T = 2 pi sqrt(a^3 / mu), for semi-major axes in km (> 0)."""
    a = np.asarray(a_km, dtype=np.float64)
    if np.any(a <= 0):
        raise ValueError("a_km: expected semi-major axes > 0 km")
    return 2.0 * math.pi * np.sqrt(a ** 3 / MU_EARTH) / 60.0


def sso_inclination(a_km) -> np.ndarray:
    """Sun-synchronous inclination in degrees of a near-circular orbit of semi-major axis a (km);
    needs a < 12,352.5 km."""
    a = np.asarray(a_km, dtype=np.float64)
    if np.any(a >= SSO_REFERENCE) or np.any(a <= 0):
        raise ValueError(f"a_km: expected 0 < a < {SSO_REFERENCE} km for a sun-synchronous orbit")
    return np.degrees(np.arccos(-(a / SSO_REFERENCE) ** 3.5))


def elements_from_apsides(perigee_alt, apogee_alt) -> tuple[np.ndarray, np.ndarray]:
    """(a in km, e) from perigee and apogee altitudes in km (perigee <= apogee)."""
    hp = np.asarray(perigee_alt, dtype=np.float64)
    ha = np.asarray(apogee_alt, dtype=np.float64)
    if hp.shape != ha.shape:
        raise ValueError(f"apogee_alt: expected the shape of perigee_alt {hp.shape}, "
                         f"got {ha.shape}")
    if np.any(hp > ha) or np.any(hp + R_EARTH <= 0):
        raise ValueError("perigee_alt: expected perigee <= apogee and positive radii")
    rp, ra = hp + R_EARTH, ha + R_EARTH
    return (rp + ra) / 2.0, (ra - rp) / (ra + rp)


def classify(perigee_alt, apogee_alt) -> np.ndarray:
    """Class index (into :data:`CLASSES`) of each orbit from its perigee and apogee altitudes
    (km)."""
    hp = np.asarray(perigee_alt, dtype=np.float64)
    ha = np.asarray(apogee_alt, dtype=np.float64)
    _, e = elements_from_apsides(hp, ha)
    geo = ((np.abs(hp - GEO_ALTITUDE) <= GEO_HALF_WIDTH)
           & (np.abs(ha - GEO_ALTITUDE) <= GEO_HALF_WIDTH))
    label = np.full(hp.shape, CLASSES.index("MEO"), dtype=np.int64)
    label[geo] = CLASSES.index("GEO")
    label[ha < LEO_APOGEE_MAX] = CLASSES.index("LEO")
    label[e > HEO_E_MIN] = CLASSES.index("HEO")
    return label


@dataclass(frozen=True)
class Catalogue:
    """A synthetic catalogue.

    Attributes:
        features: (N, 5) observed [perigee altitude km, apogee altitude km, eccentricity,
            inclination deg, period min] (see :data:`FEATURES`).
        labels: (N,) int64 class index into :data:`CLASSES`, from the true elements.
        perigee_alt, apogee_alt, semi_major_axis, eccentricity, inclination, period: (N,) the
            true elements (km, km, km, -, deg, min).
        population: (N,) name of the population each object was drawn from.
        seed: the generator's seed.
    """

    features: np.ndarray
    labels: np.ndarray
    perigee_alt: np.ndarray
    apogee_alt: np.ndarray
    semi_major_axis: np.ndarray
    eccentricity: np.ndarray
    inclination: np.ndarray
    period: np.ndarray
    population: np.ndarray
    seed: int

    @property
    def class_sizes(self) -> np.ndarray:
        """(4,) number of objects per class."""
        return np.bincount(self.labels, minlength=len(CLASSES))


def _exp(rng, mean, n):
    return rng.exponential(mean, n)


def _from_altitude(h, e):
    """Apsis altitudes of an orbit with mean altitude h (a = R + h) and eccentricity e."""
    a = R_EARTH + h
    return a * (1 - e) - R_EARTH, a * (1 + e) - R_EARTH


def _from_axis(a, e):
    return a * (1 - e) - R_EARTH, a * (1 + e) - R_EARTH


def _mixture(weights: list[float], boundary: tuple[int, ...], overlap: bool) -> np.ndarray:
    """Component probabilities; without ``overlap`` the boundary components get weight 0."""
    w = np.asarray(weights, dtype=np.float64)
    if not overlap:
        w[list(boundary)] = 0.0
    return w / w.sum()


def _draw(rng: np.random.Generator, cls: str, n: int, overlap: bool = True
          ) -> tuple[np.ndarray, ...]:
    """n candidates of one class's mixture: (perigee alt, apogee alt, inclination, population)."""
    hp, ha, inc = np.empty(n), np.empty(n), np.empty(n)
    if cls == "LEO":
        names = ("LEO sun-synchronous", "LEO shell", "LEO debris", "LEO eccentric")
        comp = rng.choice(4, size=n, p=_mixture([0.35, 0.25, 0.25, 0.15], (3,), overlap))
        m = comp == 0                                        # sun-synchronous
        h = rng.uniform(450, 900, m.sum())
        hp[m], ha[m] = _from_altitude(h, _exp(rng, 0.001, m.sum()))
        inc[m] = sso_inclination(R_EARTH + h) + rng.normal(0, 0.1, m.sum())
        m = comp == 1                                        # constellation shells
        shell = rng.choice(3, size=m.sum(), p=[0.6, 0.2, 0.2])
        h = np.array([550.0, 570.0, 1200.0])[shell] + rng.normal(0, 10, m.sum())
        hp[m], ha[m] = _from_altitude(h, _exp(rng, 0.0003, m.sum()))
        inc[m] = np.array([53.0, 70.0, 87.9])[shell] + rng.normal(0, 0.1, m.sum())
        m = comp == 2                                        # fragmentation debris
        hp[m], ha[m] = _from_altitude(rng.uniform(600, 1500, m.sum()), _exp(rng, 0.01, m.sum()))
        inc[m] = rng.normal(82, 12, m.sum())
        m = comp == 3                                        # eccentric: rocket bodies, debris
        hp[m] = rng.uniform(200, 700, m.sum())
        ha[m] = hp[m] + rng.uniform(0, 1800, m.sum())
        inc[m] = rng.uniform(0, 100, m.sum())
    elif cls == "MEO":
        names = ("MEO navigation", "MEO other", "MEO eccentric", "MEO near-GEO")
        comp = rng.choice(4, size=n, p=_mixture([0.45, 0.2, 0.2, 0.15], (2, 3), overlap))
        m = comp == 0                                        # navigation constellations
        which = rng.integers(0, 4, m.sum())
        h = np.array([20180.0, 19130.0, 23222.0, 21528.0])[which] + rng.normal(0, 30, m.sum())
        hp[m], ha[m] = _from_altitude(h, _exp(rng, 0.003, m.sum()))
        inc[m] = np.array([55.0, 64.8, 56.0, 55.0])[which] + rng.normal(0, 1, m.sum())
        m = comp == 1                                        # other, near-circular
        h = np.exp(rng.uniform(math.log(2000.0), math.log(30000.0), m.sum()))
        hp[m], ha[m] = _from_altitude(h, rng.uniform(0, 0.1, m.sum()))
        inc[m] = rng.uniform(0, 90, m.sum())
        m = comp == 2                                        # eccentric, low perigee
        hp[m] = rng.uniform(200, 2000, m.sum())
        ha[m] = np.exp(rng.uniform(math.log(2000.0), math.log(20000.0), m.sum()))
        inc[m] = rng.uniform(0, 100, m.sum())
        m = comp == 3                                        # graveyard and near-GEO drifters
        h = GEO_ALTITUDE + np.where(rng.random(m.sum()) < 0.8, 1.0, -1.0) \
            * rng.uniform(GEO_HALF_WIDTH, 3 * GEO_HALF_WIDTH, m.sum())
        hp[m], ha[m] = _from_altitude(h, _exp(rng, 0.001, m.sum()))
        inc[m] = rng.uniform(0, 15, m.sum())
    elif cls == "GEO":
        names = ("GEO station-kept", "GEO drifting")
        comp = rng.choice(2, size=n, p=[0.5, 0.5])
        drifting = comp == 1
        h = GEO_ALTITUDE + np.where(drifting, rng.normal(0, 60, n), rng.normal(0, 20, n))
        e = np.where(drifting, _exp(rng, 0.0008, n), _exp(rng, 0.0002, n))
        hp, ha = _from_altitude(h, e)
        inc = np.where(drifting, rng.uniform(0, 15, n), np.abs(rng.normal(0, 0.05, n)))
    elif cls == "HEO":
        names = ("HEO transfer", "HEO Molniya", "HEO Tundra", "HEO eccentric")
        comp = rng.choice(4, size=n, p=_mixture([0.5, 0.25, 0.1, 0.15], (3,), overlap))
        m = comp == 0                                        # geostationary transfer
        hp[m] = rng.uniform(180, 650, m.sum())
        ha[m] = GEO_ALTITUDE + rng.normal(0, 300, m.sum())
        site = rng.choice(3, size=m.sum(), p=[0.4, 0.4, 0.2])
        inc[m] = np.array([6.0, 28.5, 51.6])[site] + rng.normal(0, 1, m.sum())
        m = comp == 1                                        # Molniya
        hp[m], ha[m] = _from_axis(26560 + rng.normal(0, 50, m.sum()),
                                  rng.normal(0.72, 0.02, m.sum()))
        inc[m] = rng.normal(63.4, 0.3, m.sum())
        m = comp == 2                                        # Tundra
        hp[m], ha[m] = _from_axis(42164 + rng.normal(0, 50, m.sum()),
                                  rng.normal(0.27, 0.03, m.sum()))
        inc[m] = rng.normal(63.4, 1.0, m.sum())
        m = comp == 3                                        # other eccentric
        hp[m] = rng.uniform(200, 2000, m.sum())
        ha[m] = np.exp(rng.uniform(math.log(5000.0), math.log(40000.0), m.sum()))
        inc[m] = rng.uniform(0, 100, m.sum())
    else:
        raise ValueError(f"cls: expected one of {CLASSES}, got {cls!r}")
    inc = np.abs(inc) % 360.0
    inc = np.where(inc > 180.0, 360.0 - inc, inc)
    return hp, ha, inc, np.array(names)[comp]


def _class_counts(n: int, shares: tuple[float, ...]) -> np.ndarray:
    """Exact class sizes summing to n (largest remainder)."""
    raw = np.asarray(shares, dtype=np.float64) * n
    counts = np.floor(raw).astype(np.int64)
    order = np.argsort(-(raw - counts), kind="stable")
    counts[order[: n - counts.sum()]] += 1
    return counts


def generate(n: int, seed: int = 0, *, shares: tuple[float, ...] = DEFAULT_SHARES,
             sigma_r: float = 0.01, sigma_i: float = 0.5, overlap: bool = True) -> Catalogue:
    """Draw a catalogue of ``n`` objects; the same arguments give the same catalogue.

    Args:
        n: number of objects (>= 4).
        seed: seed of the NumPy generator (>= 0).
        shares: fraction of objects per class, in the order of :data:`CLASSES` (positive,
            summing to 1).
        sigma_r: relative noise of the observed apsis radii (>= 0).
        sigma_i: noise of the observed inclination in degrees (>= 0).
        overlap: draw the boundary populations (marked "boundary" in the module docstring);
            False leaves them out and gives well separated classes (a reference case).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < len(CLASSES):
        raise ValueError(f"n: expected an int >= {len(CLASSES)}, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected an int >= 0, got {seed!r}")
    sh = np.asarray(shares, dtype=np.float64)
    if sh.shape != (len(CLASSES),) or np.any(sh <= 0) or abs(sh.sum() - 1.0) > 1e-9:
        raise ValueError(f"shares: expected {len(CLASSES)} positive numbers summing to 1, "
                         f"got {shares!r}")
    for name, v in (("sigma_r", sigma_r), ("sigma_i", sigma_i)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"{name}: expected a finite number >= 0, got {v!r}")
    rng = np.random.default_rng(seed)
    parts = []
    for c, (cls, count) in enumerate(zip(CLASSES, _class_counts(n, tuple(sh)))):
        got = [np.empty(0)] * 3 + [np.empty(0, dtype=object)]
        while len(got[0]) < count:
            hp, ha, inc, names = _draw(rng, cls, 2 * (count - len(got[0])) + 16, overlap)
            keep = (hp >= MIN_PERIGEE) & (hp <= ha)
            keep[keep] = classify(hp[keep], ha[keep]) == c
            got = [np.concatenate([g, v[keep]]) for g, v in zip(got, (hp, ha, inc, names))]
        parts.append([g[:count] for g in got] + [np.full(count, c, dtype=np.int64)])
    hp, ha, inc, names, labels = (np.concatenate(p) for p in zip(*parts))
    order = rng.permutation(n)
    hp, ha, inc, names, labels = hp[order], ha[order], inc[order], names[order], labels[order]
    a, e = elements_from_apsides(hp, ha)

    # observation: noisy apsis radii and inclination; a, e and the period recomputed from them
    rp_obs = (hp + R_EARTH) * (1 + sigma_r * rng.standard_normal(n))
    ra_obs = (ha + R_EARTH) * (1 + sigma_r * rng.standard_normal(n))
    rp_obs, ra_obs = np.minimum(rp_obs, ra_obs), np.maximum(rp_obs, ra_obs)
    a_obs, e_obs = elements_from_apsides(rp_obs - R_EARTH, ra_obs - R_EARTH)
    inc_obs = np.abs(inc + sigma_i * rng.standard_normal(n))
    inc_obs = np.where(inc_obs > 180.0, 360.0 - inc_obs, inc_obs)
    features = np.stack([rp_obs - R_EARTH, ra_obs - R_EARTH, e_obs, inc_obs,
                         kepler_period(a_obs)], axis=1)
    return Catalogue(features=features, labels=labels, perigee_alt=hp, apogee_alt=ha,
                     semi_major_axis=a, eccentricity=e, inclination=inc, period=kepler_period(a),
                     population=names.astype(str), seed=seed)
