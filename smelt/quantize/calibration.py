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

from smelt.errors import ResourceLimit, SmeltError
from smelt.runtime.files import open_regular

BINS = 2048  # TensorRT's histogram size for entropy calibration
KL_BINS = 128  # quantized-distribution size of the KL search (int8's positive half)
METHODS = ("minmax", "percentile", "entropy")


# --- calibration samples -----------------------------------------------------------


LIMIT = float(np.finfo(np.float32).max) / 2
"""The largest magnitude a calibrated value may have: beyond it the scale
(max − min) / 255 overflows float32 (3e38 would)."""


def _read_npz(path: str) -> dict[str, np.ndarray]:
    """The arrays of the .npz at `path`: a regular file (a FIFO or device is
    refused unopened), whose members inflate to no more than the memory free."""
    if not os.path.exists(path):
        raise SmeltError(
            f"cannot read calibration data from '{path}' (no such file); write it "
            "with np.savez(path, input_name=array, ...)"
        )
    try:
        with open_regular(path, "calibration file") as f:
            if zipfile.is_zipfile(f):
                with zipfile.ZipFile(f) as z:
                    _check_inflated(path, sum(i.file_size for i in z.infolist()))
                f.seek(0)
            with np.load(f, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, AttributeError,
            KeyError, RecursionError) as e:  # fmt: skip
        raise SmeltError(
            f"cannot read calibration data from '{path}' ({type(e).__name__}: {e}); "
            "write it with np.savez(path, input_name=array, ...)"
        ) from None
    except MemoryError:
        raise ResourceLimit(
            f"the calibration file '{path}' does not fit in memory: split it into "
            "a folder of per-sample .npz files"
        ) from None


def _check_inflated(path: str, size: int) -> None:
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):  # not known here
        return
    if size > free:
        raise ResourceLimit(
            f"the calibration file '{path}' inflates to {size:,} bytes, more than "
            f"the {free:,} bytes of memory free: split it into a folder of "
            "per-sample .npz files"
        )


def _as_input(name: str, array, want: np.dtype | None, where: str) -> np.ndarray:
    """`array` as the model input `name` takes it: floats converted to the
    input's float type, integers to its integer type when every value fits;
    anything else refused by name."""
    try:
        array = np.asarray(array)
    except (ValueError, TypeError) as e:
        raise SmeltError(f"{where}: input '{name}' is not an array ({e})") from None
    have = array.dtype
    if want is None or have == want:
        return array
    fix = f"convert it (array.astype(np.{want.name}))"
    if have.kind == "f" and want.kind == "f":
        with np.errstate(over="ignore"):  # out of range: inf, refused by the caller
            return array.astype(want)
    if have.kind in "iu" and want.kind in "iu":
        info = np.iinfo(want)
        if array.size == 0 or (array.min() >= info.min and array.max() <= info.max):
            return array.astype(want)
        raise SmeltError(
            f"{where}: input '{name}' is {have.name} with values outside "
            f"{want.name}, which the model takes: {fix} with values in range"
        )
    raise SmeltError(
        f"{where}: input '{name}' is {have.name}; the model takes {want.name}: {fix}"
    )


def _first_bad(array: np.ndarray, stacked: bool) -> tuple[int, float] | None:
    """(sample index, value) of the first non-finite or too large value."""
    if array.dtype.kind != "f" or array.size == 0:
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        bad = ~np.isfinite(array) | (np.abs(array) > LIMIT)
    if not bad.any():
        return None
    if not stacked:
        return 0, float(array[bad].flat[0])
    i = int(np.argmax(bad.reshape(len(bad), -1).any(axis=1)))
    return i, float(array[i][bad[i]].flat[0])


def _bad_value(value: float) -> str:
    if np.isnan(value):
        return "NaN"
    if np.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:g}, beyond ±{LIMIT:.3g} (the scale (max − min) / 255 overflows)"


class Calibration:
    """The calibration set: `samples()` yields one feed dict per sample, each input
    with the model's own shape. An .npz holds (N, *input_shape) per input; a folder
    holds one .npz per sample (files read one at a time, in name order)."""

    def __init__(
        self,
        source,
        inputs: dict[str, tuple[int, ...]],
        dtypes: dict[str, np.dtype] | None = None,
    ):
        self.inputs = inputs
        self.dtypes = dtypes or {}  # each input's type: samples are converted
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
            self._stacked = self._check(
                self._stacked, "the calibration data", stacked=True
            )
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

    def _check(
        self, arrays: dict, where: str, stacked: bool, index: int = 0
    ) -> dict[str, np.ndarray]:
        """The model's inputs of `arrays`, converted to its types (`_as_input`),
        shapes checked and values finite; `index`: the sample's (a file's)."""
        missing = [n for n in self.inputs if n not in arrays]
        if missing:
            raise SmeltError(
                f"{where} lacks model input(s) {missing}; it holds {sorted(arrays)}"
            )
        out = {}
        for name, shape in self.inputs.items():
            array = _as_input(name, arrays[name], None, where)
            got = array.shape[1:] if stacked else array.shape
            if not _fits(got, shape) or (stacked and array.ndim == 0):
                lead = "(N, " if stacked else "("
                raise SmeltError(
                    f"{where}: input '{name}' has shape {array.shape}; the "
                    f"model wants {lead}{', '.join(str(d) for d in shape)})"
                )
            bad = _first_bad(array, stacked)  # before a conversion hides it
            if bad is not None:
                raise SmeltError(
                    f"{where}: sample {index + bad[0]} of input '{name}' holds "
                    f"{_bad_value(bad[1])}; calibration needs finite values within "
                    f"±{LIMIT:.3g}: drop or fix that sample"
                )
            array = _as_input(name, array, self.dtypes.get(name), where)
            if _first_bad(array, stacked) is not None:  # float64 past float32
                raise SmeltError(
                    f"{where}: input '{name}' holds values beyond "
                    f"{self.dtypes[name].name}, which the model takes: scale them"
                )
            out[name] = array
        return out

    def samples(self) -> Iterator[dict[str, np.ndarray]]:
        if self._stacked is not None:
            for i in range(self.count):
                yield {n: self._stacked[n][i] for n in self.inputs}
            return
        for i, path in enumerate(self._files):
            where = f"calibration sample '{path}'"
            yield self._check(_read_npz(path), where, stacked=False, index=i)


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
    for i, feeds in enumerate(calibration.samples()):
        values = {**feeds, **run(feeds)}
        for t in tensors:
            value = np.asarray(values[t], np.float32)
            bad = _first_bad(value, stacked=False)
            if bad is not None:
                raise SmeltError(
                    f"calibration sample {i}: the model's tensor '{t}' reaches "
                    f"{_bad_value(bad[1])} (the fp32 model overflows on it): drop "
                    "or scale that sample"
                )
            stats[t].add_range(value)
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
