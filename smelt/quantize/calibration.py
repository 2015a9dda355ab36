"""Calibration: samples from an .npz (or a folder of them), running statistics per
tensor (min / max and fixed-size histograms) and the range each method picks.

Memory is bounded by the tensor count, not the sample count: one sample's
activations are alive at a time and each tensor keeps two floats and at most two
`BINS`-bin histograms, whatever N is.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from smelt.errors import SmeltError

BINS = 2048  # TensorRT's histogram size for entropy calibration
KL_BINS = 128  # quantized-distribution size of the KL search (int8's positive half)
METHODS = ("minmax", "percentile", "entropy")


# --- calibration samples -----------------------------------------------------------


def _read_npz(path: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, AttributeError) as e:
        raise SmeltError(
            f"cannot read calibration data from '{path}' ({type(e).__name__}: {e}); "
            "write it with np.savez(path, input_name=array, ...)"
        ) from None


class Calibration:
    """The calibration set: `samples()` yields one feed dict per sample, each input
    with the model's own shape. An .npz holds (N, *input_shape) per input; a folder
    holds one .npz per sample (files read one at a time, in name order)."""

    def __init__(self, source, inputs: dict[str, tuple[int, ...]]):
        self.inputs = inputs
        if isinstance(source, dict):
            self._stacked, self._files = dict(source), None
        elif isinstance(source, str) and os.path.isdir(source):
            self._stacked = None
            self._files = sorted(
                os.path.join(source, f)
                for f in os.listdir(source)
                if f.endswith(".npz")
            )
            if not self._files:
                raise SmeltError(f"calibration folder '{source}' holds no .npz file")
        elif isinstance(source, str):
            self._stacked, self._files = _read_npz(source), None
        else:
            raise SmeltError(
                "calibration must be an .npz path, a folder of .npz files or a dict "
                f"of stacked arrays, not {type(source).__name__}"
            )
        if self._stacked is not None:
            self._check(self._stacked, "the calibration file", stacked=True)
            counts = {len(a) for a in self._stacked.values()}
            if len(counts) != 1:
                raise SmeltError(
                    f"calibration inputs hold different sample counts {sorted(counts)}"
                    "; stack the same N samples of every input"
                )
            self.count = counts.pop()
        else:
            self.count = len(self._files)
        if self.count == 0:
            raise SmeltError("the calibration set holds no sample")

    def _check(self, arrays: dict, where: str, stacked: bool) -> None:
        missing = [n for n in self.inputs if n not in arrays]
        if missing:
            raise SmeltError(
                f"{where} lacks model input(s) {missing}; it holds {sorted(arrays)}"
            )
        for name, shape in self.inputs.items():
            got = arrays[name].shape[1:] if stacked else arrays[name].shape
            if not _fits(got, shape):
                lead = "(N, " if stacked else "("
                raise SmeltError(
                    f"{where}: input '{name}' has shape {arrays[name].shape}; the "
                    f"model wants {lead}{', '.join(str(d) for d in shape)})"
                )

    def samples(self) -> Iterator[dict[str, np.ndarray]]:
        if self._stacked is not None:
            for i in range(self.count):
                yield {n: self._stacked[n][i] for n in self.inputs}
            return
        for path in self._files:
            arrays = _read_npz(path)
            self._check(arrays, f"calibration sample '{path}'", stacked=False)
            yield {n: arrays[n] for n in self.inputs}


def _fits(got: tuple, want: tuple) -> bool:
    """Shapes match; a model dim of 0 or -1 (symbolic) takes any size."""
    return len(got) == len(want) and all(w <= 0 or g == w for g, w in zip(got, want))


# --- statistics --------------------------------------------------------------------


@dataclass
class TensorStats:
    """Running min / max; after `start_histograms`, a |x| histogram on
    [0, absmax] and a signed one on [min, max], both `BINS` bins."""

    lo: float = np.inf
    hi: float = -np.inf
    abs_hist: np.ndarray | None = field(default=None, repr=False)
    hist: np.ndarray | None = field(default=None, repr=False)

    @property
    def absmax(self) -> float:
        return max(abs(self.lo), abs(self.hi))

    def add_range(self, x: np.ndarray) -> None:
        if x.size:
            self.lo = min(self.lo, float(x.min()))
            self.hi = max(self.hi, float(x.max()))

    def start_histograms(self) -> None:
        self.abs_hist = np.zeros(BINS, np.int64)
        self.hist = np.zeros(BINS, np.int64)

    def add_histograms(self, x: np.ndarray) -> None:
        flat = x.reshape(-1)
        top = self.absmax if self.absmax > 0 else 1.0
        self.abs_hist += np.histogram(np.abs(flat), BINS, (0.0, top))[0]
        lo, hi = (self.lo, self.hi) if self.hi > self.lo else (self.lo - 1, self.lo + 1)
        self.hist += np.histogram(flat, BINS, (lo, hi))[0]


Runner = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def collect(
    run: Runner, calibration: Calibration, tensors: list[str], histograms: bool
) -> dict[str, TensorStats]:
    """Statistics of `tensors` over the calibration set: one pass for min / max,
    a second for the histograms (their range is then known, so bins never move)."""
    stats = {t: TensorStats() for t in tensors}
    for feeds in calibration.samples():
        values = {**feeds, **run(feeds)}
        for t in tensors:
            stats[t].add_range(np.asarray(values[t], np.float32))
    if histograms:
        for s in stats.values():
            s.start_histograms()
        for feeds in calibration.samples():
            values = {**feeds, **run(feeds)}
            for t in tensors:
                stats[t].add_histograms(np.asarray(values[t], np.float32))
    return stats


# --- ranges ------------------------------------------------------------------------


def percentile_threshold(hist: np.ndarray, top: float, percentile: float) -> float:
    """The upper edge of the first bin of `hist` (on [0, top]) whose cumulative
    count reaches `percentile` percent."""
    cdf = np.cumsum(hist)
    if cdf[-1] == 0:
        return 0.0
    i = int(np.searchsorted(cdf, cdf[-1] * percentile / 100.0))
    return top * min(i + 1, len(hist)) / len(hist)


def entropy_threshold(hist: np.ndarray, top: float, levels: int = KL_BINS) -> float:
    """TensorRT's KL calibration on a |x| histogram over [0, top]: the threshold
    (the edge of bin i, i ≥ `levels`) whose clipped distribution P (outliers folded
    into the last bin) is closest in KL divergence to Q, P re-quantized to `levels`
    bins with each bin's mass spread over its non-empty source bins."""
    hist = hist.astype(np.float64)
    if len(hist) > 1:
        # the first bin holds the exact zeros of a ReLU (half the values or more):
        # left as is, that spike decides the divergence and the search clips far
        # too much; NVIDIA's pytorch-quantization levels it the same way
        hist[0] = hist[1]
    n = len(hist)
    if hist.sum() == 0:
        return 0.0
    best, best_i = np.inf, n
    tail = np.cumsum(hist[::-1])[::-1]  # tail[i] = sum(hist[i:])
    for i in range(levels, n + 1):
        p = hist[:i].copy()
        if i < n:
            p[-1] += tail[i]
        nonzero = hist[:i] != 0
        group = (np.arange(i) * levels) // i  # which of the `levels` bins each falls in
        mass = np.bincount(group, weights=hist[:i], minlength=levels)
        filled = np.bincount(group, weights=nonzero, minlength=levels)
        q = np.where(nonzero, mass[group] / np.maximum(filled[group], 1), 0.0)
        q_sum = q.sum()
        if q_sum == 0:
            continue
        qn = _smooth(q / q_sum)
        if qn is None:
            continue
        mask = p > 0
        pn = p[mask] / p.sum()
        kl = float(np.sum(pn * np.log(pn / qn[mask])))
        if kl < best:
            best, best_i = kl, i
    return top * best_i / n


def _smooth(q: np.ndarray, eps: float = 1e-4) -> np.ndarray | None:
    """q with its empty bins given `eps` (taken from the others), so that the KL
    divergence stays finite where P has mass Q lacks (the outlier bin); None when
    the others cannot spare it."""
    zeros = q == 0
    n_zero = int(zeros.sum())
    if n_zero == 0:
        return q
    n_nonzero = q.size - n_zero
    if n_nonzero == 0:
        return None
    taken = eps * n_zero / n_nonzero
    if np.any(q[~zeros] <= taken):
        return None
    return np.where(zeros, eps, q - taken)


def tensor_range(
    stats: TensorStats, method: str, percentile: float, symmetric: bool
) -> tuple[float, float]:
    """The (lo, hi) range of a tensor that `method` picks; it always holds 0."""
    lo, hi = min(stats.lo, 0.0), max(stats.hi, 0.0)
    if method == "minmax" or stats.abs_hist is None:
        pass
    elif method == "percentile":
        if symmetric:
            t = percentile_threshold(stats.abs_hist, stats.absmax, percentile)
            lo, hi = max(lo, -t), min(hi, t)
        else:
            lo, hi = _two_sided(stats, percentile)
    elif method == "entropy":
        t = entropy_threshold(stats.abs_hist, stats.absmax)
        lo, hi = max(lo, -t), min(hi, t)
    else:
        raise SmeltError(f"unknown calibration method '{method}'; use one of {METHODS}")
    if symmetric:
        t = max(-lo, hi)
        lo, hi = -t, t
    return lo, hi


def _two_sided(stats: TensorStats, percentile: float) -> tuple[float, float]:
    """Lower and upper `percentile` bounds from the signed histogram: (100 − p) %
    of the values fall below lo and (100 − p) % above hi."""
    hist, width = stats.hist, (stats.hi - stats.lo) / BINS
    if stats.hi <= stats.lo or hist.sum() == 0:
        return min(stats.lo, 0.0), max(stats.hi, 0.0)
    upper = stats.lo + width * percentile_threshold(hist, BINS, percentile)
    lower_bins = percentile_threshold(hist[::-1], BINS, percentile)
    lower = stats.hi - width * lower_bins
    return min(lower, 0.0), max(upper, 0.0)
