"""The statistics every task's metrics are made of: seeded bootstrap means and standard errors (of each column,
of a maximum), a summary of columns, metrics by group, Pearson's r.

Standard errors are the standard deviation of each statistic over ``n_boot`` (1,000) bootstrap resamples of the
examples, drawn from ``rng_for(seed, "bootstrap", key)``; the bootstrap mean is reported beside it. A kind's own
metrics (``commonlink.kinds.<kind>.metrics``) are built on these.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from commonlink.seeding import rng_for

__all__ = ["N_BOOTSTRAP", "bootstrap", "bootstrap_max_se", "grouped", "mean_of_ses", "pearson", "summarise"]

N_BOOTSTRAP = 1000


def bootstrap(
    values: np.ndarray, *, seed: int, key: str, n_boot: int = N_BOOTSTRAP, chunk: int = 50
) -> tuple[np.ndarray, np.ndarray]:
    """(bootstrap means, standard errors) of each column of ``values`` (n examples x k statistics)."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    n = values.shape[0]
    if n == 0:
        nan = np.full(values.shape[1], np.nan)
        return nan, nan
    rng = rng_for(seed, "bootstrap", key)
    means = np.empty((n_boot, values.shape[1]))
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = values[idx].mean(axis=1)
    return means.mean(axis=0), means.std(axis=0, ddof=1) if n_boot > 1 else np.zeros(values.shape[1])


def bootstrap_max_se(
    values: np.ndarray, *, seed: int, key: str, n_boot: int = N_BOOTSTRAP, chunk: int = 50
) -> float | None:
    """Bootstrap standard error of the largest of ``values`` (a chain set's max steps); None without values."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) == 0:
        return None
    if n_boot < 2:
        return 0.0
    rng = rng_for(seed, "bootstrap-max", key)
    maxima = np.empty(n_boot)
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        maxima[start:stop] = values[rng.integers(0, len(values), size=(stop - start, len(values)))].max(axis=1)
    return float(maxima.std(ddof=1))


def mean_of_ses(ses: Sequence[float | None]) -> float | None:
    """SE of an average of independent per-group estimates, each with its own SE."""
    ses = [v for v in ses if v is not None]
    return (sum(v * v for v in ses) ** 0.5 / len(ses)) if ses else None


def summarise(columns: dict[str, np.ndarray], *, seed: int, key: str, n_boot: int) -> dict:
    names = list(columns)
    matrix = np.column_stack([columns[name] for name in names]) if names else np.zeros((0, 0))
    n = int(matrix.shape[0])
    out: dict = {"n": n}
    if n == 0:
        return out
    boot_mean, se = bootstrap(matrix, seed=seed, key=key, n_boot=n_boot)
    for j, name in enumerate(names):
        out[name] = float(matrix[:, j].mean())
        out[f"{name}_se"] = float(se[j])
        out[f"{name}_boot_mean"] = float(boot_mean[j])
    return out


def grouped(
    records: Sequence[dict], key_fn: Callable[[dict], object], *, seed: int, name: str, n_boot: int, fn
) -> dict:
    groups: dict[object, list[dict]] = defaultdict(list)
    for record in records:
        groups[key_fn(record)].append(record)
    return {
        str(k): fn(groups[k], seed=seed, key=f"{name}={k}", n_boot=n_boot)
        for k in sorted(groups, key=lambda v: (str(type(v)), v))
    }


def pearson(x: Sequence[float], y: Sequence[float]) -> dict:
    """Pearson r with a two-sided p-value (Student t with n-2 degrees of freedom; scipy when installed,
    else a normal approximation, exact enough for n > 30)."""
    xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = int(xa.size)
    if n < 3 or xa.std() == 0 or ya.std() == 0:
        return {"r": None, "p_value": None, "n": n}
    r = float(np.corrcoef(xa, ya)[0, 1])
    r = max(-1.0, min(1.0, r))
    if abs(r) == 1.0:
        return {"r": r, "p_value": 0.0, "n": n}
    t = r * math.sqrt((n - 2) / (1 - r * r))
    try:
        from scipy import stats

        p = float(2 * stats.t.sf(abs(t), n - 2))
    except ImportError:
        p = math.erfc(abs(t) / math.sqrt(2))
    return {"r": r, "p_value": p, "n": n}
