"""Apache DataSketches behind the Summary protocol: what the count sketch does not do.

| class            | DataSketches sketch            | answers                                  |
|------------------|--------------------------------|------------------------------------------|
| ``KLLQuantiles`` | ``kll_doubles_sketch(k)``      | ranks, quantiles, median                 |
| ``HLLDistinct``  | ``hll_sketch(lg_k, HLL_8)``    | number of distinct keys                  |
| ``FrequentItems``| ``frequent_{items,strings}_sketch`` | heavy hitters with deterministic bounds |
| ``VarOptSample`` | ``var_opt_sketch(k)``          | weighted sample, subset-sum estimates    |

Common behaviour:

* ``update(values, weights=None)`` takes numpy batches like the count sketch.
  DataSketches' Python API is item-at-a-time (except KLL), so the adapters
  pre-aggregate the batch with numpy where the sketch allows it (distinct
  keys for HLL, per-key weight sums for frequent items) and only loop over
  what is left.  Keys are canonicalized like the count sketch's
  (:mod:`.hashing`): ``3`` and ``3.0`` are the same key; NaN is rejected.
* ``merge(other)`` / ``+`` combine two summaries of the same kind and size.
* ``subtract`` always raises :class:`~sketchql.errors.UnsupportedOperation`:
  these sketches are not linear, so the index expires them by dropping whole
  cells (or use a :class:`~.countsketch.CountSketch`, which subtracts exactly).
* ``to_bytes()`` is a small sketchql header (magic ``SQDS``, version, kind,
  key type, parameter) followed by DataSketches' own serialization, which is
  little-endian and portable; ``from_bytes`` turns any malformed input into a
  :class:`~sketchql.errors.SummaryError`.  A round trip gives an equal
  summary; its bytes are identical except for ``FrequentItems``, whose
  DataSketches hash map may re-order the same items on deserialization.
* ``nbytes`` is the size of the serialized sketch (DataSketches does not
  expose its in-memory footprint; the serialized image is a close proxy).

>>> import numpy as np
>>> kll = KLLQuantiles(k=200).update(np.arange(1000.0))
>>> abs(kll.quantile(0.5) - 500) <= 1000 * kll.error_bound()
True
>>> round(HLLDistinct(lg_k=12).update(np.arange(100) % 10).distinct())
10
"""
from __future__ import annotations

import math
import struct

import datasketches as ds
import numpy as np

from ..errors import SummaryError, UnsupportedOperation
from .hashing import as_key_array, key_codes

_MAGIC = b"SQDS"
_VERSION = 1
_HEADER = struct.Struct("<4sBBBxI")  # magic, version, kind, key type, pad, parameter
_KINDS = {"kll": 1, "hll": 2, "frequent": 3, "varopt": 4}
_KEY_TYPES = {None: 0, "int": 1, "float": 2, "str": 3}
_KEY_TYPE_NAMES = {v: k for k, v in _KEY_TYPES.items()}


def _z_two_sided(confidence: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2.0))


def _check_confidence(confidence, where: str) -> float:
    if not isinstance(confidence, (int, float, np.floating)) or not (0 < confidence < 1):
        raise SummaryError(f"{where}: confidence must be in (0, 1), got {confidence!r}")
    return float(confidence)


def _typed_keys(values, where: str, key_type: str | None) -> tuple[np.ndarray, str]:
    """Canonical keys of a batch plus their type ("int", "float" or "str").

    Integral floats become ints (``3.0`` is the key ``3``) unless the summary
    already holds float keys; a batch of a different kind raises.
    """
    arr = as_key_array(values, where)
    kind = arr.dtype.kind
    if kind in "US":
        if kind == "S":
            try:
                arr = np.char.decode(arr, "utf-8")
            except UnicodeDecodeError as exc:
                raise SummaryError(f"{where}: bytes keys must be UTF-8 ({exc})") from None
        typ = "str"
    elif kind in "biu":
        if kind == "u" and len(arr) and int(arr.max()) >= 2**63:
            raise SummaryError(f"{where}: unsigned key {int(arr.max())} does not fit int64")
        arr = arr.astype(np.int64)
        typ = "int"
    else:
        f = arr.astype(np.float64)
        key_codes(f, where)  # rejects NaN with the position
        integral = np.isfinite(f) & (f == np.floor(f)) & (np.abs(f) < 2.0**63)
        if integral.all() and key_type != "float":
            arr, typ = f.astype(np.int64), "int"
        else:
            arr, typ = f, "float"
    if key_type is None or typ == key_type:
        return arr, typ
    if key_type == "float" and typ == "int":
        return arr.astype(np.float64), "float"
    raise SummaryError(f"{where}: this summary holds {key_type} keys, got a batch of {typ} keys")


def _check_positive_weights(weights, n: int, where: str, integral: bool) -> np.ndarray | None:
    if weights is None:
        return None
    w = np.asarray(weights)
    if w.ndim == 0:
        w = np.full(n, w)
    if w.shape != (n,):
        raise SummaryError(f"{where}: weights shape {w.shape} does not match {n} values")
    if w.dtype.kind not in "biuf":
        raise SummaryError(f"{where}: unsupported weight dtype {w.dtype}")
    wf = w.astype(np.float64)
    if not np.isfinite(wf).all():
        raise SummaryError(f"{where}: weights must be finite")
    if (wf < 0).any():
        i = int(np.flatnonzero(wf < 0)[0])
        raise UnsupportedOperation(f"{where}: negative weight {wf[i]} at position {i}; this sketch only "
                                   "adds (use a CountSketch for deletions, or drop the whole cell)")
    if integral:
        if (wf != np.rint(wf)).any():
            i = int(np.flatnonzero(wf != np.rint(wf))[0])
            raise SummaryError(f"{where}: weights must be integers, got {wf[i]} at position {i}")
        return w.astype(np.int64)
    return wf


def _pack(kind: str, key_type: str | None, param: int, payload: bytes) -> bytes:
    return _HEADER.pack(_MAGIC, _VERSION, _KINDS[kind], _KEY_TYPES[key_type], param) + payload


def _unpack(data, kind: str, cls_name: str) -> tuple[str | None, int, bytes]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise SummaryError(f"{cls_name}.from_bytes: expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) < _HEADER.size:
        raise SummaryError(f"{cls_name}.from_bytes: {len(data)} bytes is too short for a {_HEADER.size}-byte header")
    magic, ver, k, kt, param = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        raise SummaryError(f"{cls_name}.from_bytes: not a sketchql DataSketches summary (magic {magic!r})")
    if ver != _VERSION:
        raise SummaryError(f"{cls_name}.from_bytes: unsupported format version {ver} (expected {_VERSION})")
    if k != _KINDS[kind]:
        names = {v: n for n, v in _KINDS.items()}
        raise SummaryError(f"{cls_name}.from_bytes: bytes hold a {names.get(k, f'kind {k}')} summary, not {kind}")
    if kt not in _KEY_TYPE_NAMES:
        raise SummaryError(f"{cls_name}.from_bytes: unknown key type code {kt}")
    return _KEY_TYPE_NAMES[kt], param, data[_HEADER.size:]


def _deserialize(fn, payload: bytes, cls_name: str, *args):
    try:
        return fn(payload, *args)
    except Exception as exc:  # DataSketches raises ValueError/IndexError/RuntimeError on garbage
        raise SummaryError(f"{cls_name}.from_bytes: corrupt DataSketches payload ({type(exc).__name__}: {exc})") from None


class _Adapter:
    """Shared plumbing: copy, +, subtract (unsupported), compress (unsupported)."""

    kind = "abstract"
    _alternative = "the index expires non-subtractable summaries by dropping whole cells"

    def subtract(self, other):
        raise UnsupportedOperation(f"{type(self).__name__} cannot subtract (the sketch is not linear); "
                                   f"{self._alternative}, or use CountSketch for exact subtraction")

    def __sub__(self, other):
        return self.subtract(other)

    def __add__(self, other):
        return self.copy().merge(other)

    def copy(self):
        return type(self).from_bytes(self.to_bytes())

    def compress(self, factor: int = 2):
        raise UnsupportedOperation(f"{type(self).__name__} cannot compress in place; build a smaller one "
                                   "(smaller k / lg_k) from the data, or compress a CountSketch")

    def _check_same(self, other, attrs: tuple[str, ...], op: str) -> None:
        if not isinstance(other, type(self)):
            raise SummaryError(f"{type(self).__name__}.{op}: other is a {type(other).__name__}, "
                               f"not a {type(self).__name__}")
        bad = [f"{a}={getattr(self, a)} vs {getattr(other, a)}" for a in attrs if getattr(self, a) != getattr(other, a)]
        if bad:
            raise SummaryError(f"{type(self).__name__}.{op}: summaries differ in " + ", ".join(bad))

    def __eq__(self, other):
        return type(other) is type(self) and self.to_bytes() == other.to_bytes()

    __hash__ = None


# -- KLL ---------------------------------------------------------------------------
class KLLQuantiles(_Adapter):
    """Quantiles of a numeric attribute: DataSketches' KLL sketch (Karnin, Lang, Liberty 2016).

    Keeps ``O(k)`` samples in compactor levels; the normalized rank of any
    value is estimated within ``eps(k)`` (about ``1.33 / k^0.9``; ``k = 200``
    gives 1.33 %) with 99 % confidence.

    * ``estimate(values)`` -> estimated normalized rank ``P(X <= v)`` of each
      value (inclusive ranks, in [0, 1]);
    * ``quantile(q)`` -> a stored value ``x`` whose inclusive rank is at least
      ``q`` and within ``eps`` of it (vectorized over ``q``); ``median()``;
    * ``error_bound(c)`` -> the normalized rank error (a fraction of ``n``,
      not a value difference).

    >>> import numpy as np
    >>> s = KLLQuantiles(200).update(np.arange(1, 101.0))
    >>> s.median(), float(s.estimate([50.0])[0])
    (50.0, 0.5)
    """

    kind = "kll"

    def __init__(self, k: int = 200):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 8 <= k <= 65535:
            raise SummaryError(f"KLLQuantiles: k must be an integer in [8, 65535], got {k!r}")
        self.k = int(k)
        self._sk = ds.kll_doubles_sketch(self.k)

    @property
    def n(self) -> int:
        return int(self._sk.n)

    def _values(self, values, where: str) -> np.ndarray:
        arr = as_key_array(values, where)
        if arr.dtype.kind not in "biuf":
            raise SummaryError(f"{where}: KLL summarizes numbers, got dtype {arr.dtype}")
        f = arr.astype(np.float64)
        nan = np.isnan(f)
        if nan.any():
            raise SummaryError(f"{where}: NaN value at position {int(np.flatnonzero(nan)[0])}")
        return f

    def update(self, values, weights=None) -> "KLLQuantiles":
        """Add a batch; integer ``weights`` repeat a value that many times."""
        f = self._values(values, "KLLQuantiles.update values")
        w = _check_positive_weights(weights, len(f), "KLLQuantiles.update", integral=True)
        if w is not None:
            f = np.repeat(f, w)
        if len(f):
            self._sk.update(np.ascontiguousarray(f))
        return self

    def estimate(self, values) -> np.ndarray:
        """Estimated normalized rank ``P(X <= v)`` of each value (NaN when empty)."""
        f = self._values(values, "KLLQuantiles.estimate values")
        if self._sk.is_empty():
            return np.full(len(f), np.nan)
        u, inv = np.unique(f, return_inverse=True)
        cdf = np.asarray(self._sk.get_cdf(u.tolist(), inclusive=True))[:-1]
        return cdf[inv]

    def quantile(self, q):
        """Value at normalized rank ``q`` (scalar or array of ranks in [0, 1])."""
        qa = np.asarray(q, dtype=np.float64)
        if qa.ndim > 1 or np.isnan(qa).any() or (qa < 0).any() or (qa > 1).any():
            raise SummaryError(f"KLLQuantiles.quantile: ranks must be in [0, 1], got {q!r}")
        if self._sk.is_empty():
            raise SummaryError("KLLQuantiles.quantile: the summary is empty")
        res = np.asarray(self._sk.get_quantiles(np.atleast_1d(qa).tolist(), inclusive=True))
        return float(res[0]) if qa.ndim == 0 else res

    def median(self) -> float:
        return self.quantile(0.5)

    def error_bound(self, confidence: float = 0.99) -> float:
        """Normalized rank error: ``|rank_hat - rank| <= eps`` with this confidence.

        DataSketches publishes ``eps`` at 99 % confidence; it is returned as is
        for any confidence up to 0.99 (conservative) and scaled by the Gaussian
        tail ratio above.  0 while the sketch still holds every value exactly.
        """
        c = _check_confidence(confidence, "KLLQuantiles.error_bound")
        if not self._sk.is_estimation_mode():
            return 0.0
        eps = self._sk.normalized_rank_error(False)
        return eps if c <= 0.99 else eps * _z_two_sided(c) / _z_two_sided(0.99)

    def confidence(self) -> float:
        """``1 - eps`` (1.0 while exact)."""
        return 1.0 - self.error_bound(0.99)

    def merge(self, other: "KLLQuantiles") -> "KLLQuantiles":
        self._check_same(other, ("k",), "merge")
        self._sk.merge(other._sk)
        return self

    def empty_like(self) -> "KLLQuantiles":
        return KLLQuantiles(self.k)

    @property
    def nbytes(self) -> int:
        return _HEADER.size + len(self._sk.serialize())

    def to_bytes(self) -> bytes:
        return _pack("kll", None, self.k, self._sk.serialize())

    @classmethod
    def from_bytes(cls, data) -> "KLLQuantiles":
        _, k, payload = _unpack(data, "kll", cls.__name__)
        out = cls(k)
        out._sk = _deserialize(ds.kll_doubles_sketch.deserialize, payload, cls.__name__)
        if out._sk.k != k:
            raise SummaryError(f"{cls.__name__}.from_bytes: header k={k} but payload k={out._sk.k}")
        return out

    def __repr__(self) -> str:
        return f"KLLQuantiles(k={self.k}, n={self.n})"


# -- HLL ---------------------------------------------------------------------------
class HLLDistinct(_Adapter):
    """Number of distinct keys: DataSketches' HyperLogLog (``HLL_8``, ``2^lg_k`` registers).

    The relative standard error is about ``1.04 / sqrt(2^lg_k)`` (1.6 % at
    ``lg_k = 12``).  Keys are hashed from their canonical codes
    (:func:`~.hashing.key_codes`), so ``3`` and ``3.0`` count once; each
    batch is de-duplicated with numpy before it reaches the sketch.

    * ``distinct()`` -> estimated number of distinct keys;
    * ``estimate(values)`` -> the same number, broadcast over ``values``
      (a distinct-count sketch has one statistic; per-key frequencies come
      from a CountSketch);
    * ``error_bound(c)`` -> absolute bound on ``|distinct_hat - distinct|``.

    >>> import numpy as np
    >>> round(HLLDistinct(12).update(np.array([1, 2, 2, 3.0])).distinct())
    3
    """

    kind = "hll"

    def __init__(self, lg_k: int = 12):
        if isinstance(lg_k, bool) or not isinstance(lg_k, (int, np.integer)) or not 4 <= lg_k <= 21:
            raise SummaryError(f"HLLDistinct: lg_k must be an integer in [4, 21], got {lg_k!r}")
        self.lg_k = int(lg_k)
        self._sk = ds.hll_sketch(self.lg_k, ds.tgt_hll_type.HLL_8)
        self._merged = False

    def update(self, values, weights=None) -> "HLLDistinct":
        """Add a batch of keys; ``weights`` (if given) must be >= 0, and 0 skips the key."""
        codes = key_codes(values, "HLLDistinct.update values")
        w = _check_positive_weights(weights, len(codes), "HLLDistinct.update", integral=False)
        if w is not None:
            codes = codes[w > 0]
        sk = self._sk
        for c in np.unique(codes.view(np.int64)).tolist():
            sk.update(c)
        return self

    def distinct(self) -> float:
        return float(self._sk.get_estimate())

    def estimate(self, values=None) -> np.ndarray:
        """The distinct-count estimate, once per value (see class docstring)."""
        n = 1 if values is None else len(as_key_array(values, "HLLDistinct.estimate values"))
        return np.full(n, self.distinct())

    def _std_devs(self, confidence: float) -> int:
        for k in (1, 2, 3):
            if math.erf(k / math.sqrt(2)) >= confidence:
                return k
        raise SummaryError(f"HLLDistinct.error_bound: DataSketches bounds reach 3 standard deviations "
                           f"(99.73 %), got confidence {confidence}")

    def error_bound(self, confidence: float = 0.95) -> float:
        """Absolute error of :meth:`distinct` at this confidence (DataSketches' 1-3 sigma bounds)."""
        c = _check_confidence(confidence, "HLLDistinct.error_bound")
        k = self._std_devs(c)
        est = self.distinct()
        return max(self._sk.get_upper_bound(k) - est, est - self._sk.get_lower_bound(k))

    def confidence(self) -> float:
        """``1 - relative standard error`` (1.0 while the sketch is exact)."""
        if self._sk.is_empty():
            return 1.0
        est = self.distinct()
        return 1.0 - min(1.0, (self._sk.get_upper_bound(1) - est) / max(est, 1.0))

    def merge(self, other: "HLLDistinct") -> "HLLDistinct":
        self._check_same(other, ("lg_k",), "merge")
        u = ds.hll_union(self.lg_k)
        u.update(self._sk)
        u.update(other._sk)
        self._sk = u.get_result(ds.tgt_hll_type.HLL_8)
        return self

    def empty_like(self) -> "HLLDistinct":
        return HLLDistinct(self.lg_k)

    @property
    def nbytes(self) -> int:
        return _HEADER.size + int(self._sk.get_updatable_serialization_bytes())

    def to_bytes(self) -> bytes:
        return _pack("hll", None, self.lg_k, self._sk.serialize_compact())

    @classmethod
    def from_bytes(cls, data) -> "HLLDistinct":
        _, lg_k, payload = _unpack(data, "hll", cls.__name__)
        if not 4 <= lg_k <= 21:
            raise SummaryError(f"{cls.__name__}.from_bytes: corrupt header (lg_k={lg_k})")
        out = cls(lg_k)
        out._sk = _deserialize(ds.hll_sketch.deserialize, payload, cls.__name__)
        if out._sk.lg_config_k != lg_k:
            raise SummaryError(f"{cls.__name__}.from_bytes: header lg_k={lg_k} but payload lg_k={out._sk.lg_config_k}")
        return out

    def __repr__(self) -> str:
        return f"HLLDistinct(lg_k={self.lg_k}, distinct~{self.distinct():.0f})"


# -- frequent items ------------------------------------------------------------------
_SERDES = {"int": ds.PyLongsSerDe, "float": ds.PyDoublesSerDe}


class FrequentItems(_Adapter):
    """Heavy hitters with deterministic bounds: DataSketches' frequent-items sketch
    (Misra-Gries with a purging hash map, ``0.75 * 2^lg_max_k`` counters).

    For every key ``lower <= f <= upper`` and ``|estimate - f| <= eps * N``
    with ``eps = 3.5 / 2^lg_max_k`` and ``N`` the total weight (always, no
    randomness).  The peer of ``CountSketch(track_heavy=k)``.  String keys use
    ``frequent_strings_sketch``; numeric keys ``frequent_items_sketch`` over
    Python ints (or floats for non-integral keys) so that hashing inside the
    sketch is deterministic.  Each batch is aggregated per distinct key with
    numpy; the sketch sees one weighted update per distinct key.

    >>> import numpy as np
    >>> fi = FrequentItems(6).update(np.array([5] * 50 + list(range(100))))
    >>> fi.heavy_hitters()[0][:2]
    (5, 51)
    """

    kind = "frequent"

    def __init__(self, lg_max_k: int = 10, key_type: str | None = None):
        if isinstance(lg_max_k, bool) or not isinstance(lg_max_k, (int, np.integer)) or not 3 <= lg_max_k <= 26:
            raise SummaryError(f"FrequentItems: lg_max_k must be an integer in [3, 26], got {lg_max_k!r}")
        if key_type not in _KEY_TYPES:
            raise SummaryError(f"FrequentItems: key_type must be 'int', 'float', 'str' or None, got {key_type!r}")
        self.lg_max_k = int(lg_max_k)
        self.key_type = key_type
        self._sk = None if key_type is None else self._new(key_type)

    def _new(self, key_type: str):
        if key_type == "str":
            return ds.frequent_strings_sketch(self.lg_max_k)
        return ds.frequent_items_sketch(self.lg_max_k)

    @property
    def total_weight(self) -> int:
        return 0 if self._sk is None else int(self._sk.total_weight)

    def update(self, values, weights=None) -> "FrequentItems":
        """Add a batch; integer ``weights`` >= 0 (default 1)."""
        keys, typ = _typed_keys(values, "FrequentItems.update values", self.key_type)
        w = _check_positive_weights(weights, len(keys), "FrequentItems.update", integral=True)
        if not len(keys):
            return self
        if self._sk is None:
            self.key_type, self._sk = typ, self._new(typ)
        uniq, inv = np.unique(keys, return_inverse=True)
        counts = np.bincount(inv, weights=None if w is None else w.astype(np.float64), minlength=len(uniq))
        counts = np.rint(counts).astype(np.int64)
        sk = self._sk
        for item, c in zip(uniq.tolist(), counts.tolist()):
            if c:
                sk.update(item, c)
        return self

    def estimate(self, values) -> np.ndarray:
        """Estimated frequency of each key (0 for keys the sketch never kept)."""
        keys, _ = _typed_keys(values, "FrequentItems.estimate values", self.key_type)
        if self._sk is None or not len(keys):
            return np.zeros(len(keys), dtype=np.int64)
        uniq, inv = np.unique(keys, return_inverse=True)
        est = np.array([self._sk.get_estimate(x) for x in uniq.tolist()], dtype=np.int64)
        return est[inv]

    def bounds(self, values) -> tuple[np.ndarray, np.ndarray]:
        """Deterministic (lower, upper) bounds on each key's frequency."""
        keys, _ = _typed_keys(values, "FrequentItems.bounds values", self.key_type)
        if self._sk is None:
            z = np.zeros(len(keys), dtype=np.int64)
            return z, z.copy()
        lo = np.array([self._sk.get_lower_bound(x) for x in keys.tolist()], dtype=np.int64)
        hi = np.array([self._sk.get_upper_bound(x) for x in keys.tolist()], dtype=np.int64)
        return lo, hi

    def heavy_hitters(self, threshold: int = 0, no_false_positives: bool = False) -> list[tuple]:
        """``[(key, estimate, lower, upper), ...]`` above ``threshold``, largest first."""
        if self._sk is None:
            return []
        et = (ds.frequent_items_error_type.NO_FALSE_POSITIVES if no_false_positives
              else ds.frequent_items_error_type.NO_FALSE_NEGATIVES)
        return [tuple(r) for r in self._sk.get_frequent_items(et, int(threshold))]

    def error_bound(self, confidence: float = 0.95) -> float:
        """``eps * N``: holds for every key with probability 1 (so for any confidence)."""
        _check_confidence(confidence, "FrequentItems.error_bound")
        if self._sk is None:
            return 0.0
        return float(self._sk.epsilon * self._sk.total_weight)

    def confidence(self) -> float:
        """``1 - eps`` (1.0 while empty)."""
        return 1.0 if self._sk is None else 1.0 - float(self._sk.epsilon)

    def merge(self, other: "FrequentItems") -> "FrequentItems":
        self._check_same(other, ("lg_max_k",), "merge")
        if other._sk is None:
            return self
        if self._sk is None:
            self.key_type, self._sk = other.key_type, other.copy()._sk
            return self
        if self.key_type != other.key_type:
            if {self.key_type, other.key_type} == {"int", "float"}:
                raise SummaryError("FrequentItems.merge: int-keyed and float-keyed summaries; build both with "
                                   "key_type='float'")
            raise SummaryError(f"FrequentItems.merge: key types differ ({self.key_type} vs {other.key_type})")
        self._sk.merge(other._sk)
        return self

    def empty_like(self) -> "FrequentItems":
        return FrequentItems(self.lg_max_k, self.key_type)

    def _payload(self) -> bytes:
        if self._sk is None:
            return b""
        if self.key_type == "str":
            return self._sk.serialize()
        return self._sk.serialize(_SERDES[self.key_type]())

    @property
    def nbytes(self) -> int:
        return _HEADER.size + len(self._payload())

    def to_bytes(self) -> bytes:
        return _pack("frequent", self.key_type, self.lg_max_k, self._payload())

    @classmethod
    def from_bytes(cls, data) -> "FrequentItems":
        key_type, lg, payload = _unpack(data, "frequent", cls.__name__)
        if not 3 <= lg <= 26:
            raise SummaryError(f"{cls.__name__}.from_bytes: corrupt header (lg_max_k={lg})")
        out = cls(lg, key_type)
        if key_type is None:
            if payload:
                raise SummaryError(f"{cls.__name__}.from_bytes: {len(payload)} unexpected bytes after an empty summary")
            return out
        if key_type == "str":
            out._sk = _deserialize(ds.frequent_strings_sketch.deserialize, payload, cls.__name__)
        else:
            out._sk = _deserialize(ds.frequent_items_sketch.deserialize, payload, cls.__name__,
                                   _SERDES[key_type]())
        return out

    def __repr__(self) -> str:
        return f"FrequentItems(lg_max_k={self.lg_max_k}, key_type={self.key_type!r}, N={self.total_weight})"


# -- VarOpt ------------------------------------------------------------------------
_VAROPT_SERDES = {"int": ds.PyLongsSerDe, "float": ds.PyDoublesSerDe, "str": ds.PyStringsSerDe}


class VarOptSample(_Adapter):
    """Weighted sample of at most ``k`` items: DataSketches' VarOpt sketch (Cohen et al. 2011).

    Items heavier than a threshold ``tau`` are kept with their weight; lighter
    ones are sampled with probability ``w / tau`` and carry the adjusted
    weight ``tau``, so the Horvitz-Thompson sum of sampled weights over any
    subset is an unbiased estimate of the subset's total weight, with
    variance at most ``tau * W_subset``.

    * ``estimate(values)`` -> estimated total weight of each key (HT subset sum
      over the sample items equal to it);
    * ``sample()`` -> ``(items, adjusted_weights)``; ``subset_sum(pred)``;
    * ``error_bound(c)`` -> Chebyshev ``sqrt(tau * W / (1 - c))``, a bound on
      the error of any subset's estimate (``W`` the total weight; 0 while exact).

    The sampling randomness is DataSketches' own generator, which cannot be
    seeded from Python: samples are not reproducible run to run (their bytes
    round-trip exactly).  Updates loop in Python over every item (VarOpt keeps
    duplicate items apart, so a batch cannot be pre-aggregated).

    >>> import numpy as np
    >>> v = VarOptSample(k=50).update(np.arange(10), weights=np.ones(10))
    >>> float(v.estimate([3])[0]), v.total_weight
    (1.0, 10.0)
    """

    kind = "varopt"

    def __init__(self, k: int = 1024, key_type: str | None = None):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 2 <= k <= 2**31 - 1:
            raise SummaryError(f"VarOptSample: k must be an integer in [2, 2^31), got {k!r}")
        if key_type not in _KEY_TYPES:
            raise SummaryError(f"VarOptSample: key_type must be 'int', 'float', 'str' or None, got {key_type!r}")
        self.k = int(k)
        self.key_type = key_type
        self._sk = ds.var_opt_sketch(self.k)
        self._w = 0.0   # total weight (the sketch does not report it cheaply)

    @property
    def n(self) -> int:
        return int(self._sk.n)

    @property
    def total_weight(self) -> float:
        return float(self._w)

    def update(self, values, weights=None) -> "VarOptSample":
        """Add a batch of items with weights >= 0 (default 1.0)."""
        keys, typ = _typed_keys(values, "VarOptSample.update values", self.key_type)
        w = _check_positive_weights(weights, len(keys), "VarOptSample.update", integral=False)
        if not len(keys):
            return self
        self.key_type = typ
        wl = [1.0] * len(keys) if w is None else w.tolist()
        upd = self._sk.update
        for item, wt in zip(keys.tolist(), wl):
            upd(item, wt)
        self._w += float(len(keys)) if w is None else float(w.sum())
        return self

    def sample(self) -> tuple[np.ndarray, np.ndarray]:
        """Sampled items and their adjusted (Horvitz-Thompson) weights."""
        pairs = list(self._sk)
        if not pairs:
            return np.zeros(0), np.zeros(0)
        items, wts = zip(*pairs)
        return np.asarray(items), np.asarray(wts, dtype=np.float64)

    def subset_sum(self, predicate) -> dict:
        """DataSketches' subset-sum estimate with its bounds: keys estimate, lower_bound, upper_bound, total_sketch_weight."""
        return dict(self._sk.estimate_subset_sum(predicate))

    def estimate(self, values) -> np.ndarray:
        """HT estimate of each key's total weight."""
        keys, _ = _typed_keys(values, "VarOptSample.estimate values", self.key_type)
        items, wts = self.sample()
        if not len(items) or not len(keys):
            return np.zeros(len(keys))
        if (items.dtype.kind in "US") != (keys.dtype.kind in "US"):
            raise SummaryError("VarOptSample.estimate: query keys and sampled items differ in type")
        uniq, inv = np.unique(items, return_inverse=True)
        sums = np.bincount(inv, weights=wts, minlength=len(uniq))
        pos = np.clip(np.searchsorted(uniq, keys), 0, len(uniq) - 1)
        return np.where(uniq[pos] == keys, sums[pos], 0.0)

    def tau(self) -> float:
        """The sampling threshold (0 while every item is kept)."""
        if self._sk.n <= self.k:
            return 0.0
        _, wts = self.sample()
        return float(wts.min()) if len(wts) else 0.0

    def error_bound(self, confidence: float = 0.95) -> float:
        """Chebyshev bound ``sqrt(tau * W / (1 - c))`` on any subset-sum estimate's error."""
        c = _check_confidence(confidence, "VarOptSample.error_bound")
        return math.sqrt(self.tau() * self._w / (1.0 - c))

    def confidence(self) -> float:
        """``1 - sqrt(tau / W)``: one minus the relative standard error of the total (1.0 while exact)."""
        if self._w <= 0:
            return 1.0
        return 1.0 - min(1.0, math.sqrt(self.tau() / self._w))

    def merge(self, other: "VarOptSample") -> "VarOptSample":
        self._check_same(other, ("k",), "merge")
        if self.key_type and other.key_type and self.key_type != other.key_type:
            raise SummaryError(f"VarOptSample.merge: key types differ ({self.key_type} vs {other.key_type})")
        u = ds.var_opt_union(self.k)
        u.update(self._sk)
        u.update(other._sk)
        self._sk = u.get_result()
        self._w += other._w
        self.key_type = self.key_type or other.key_type
        return self

    def empty_like(self) -> "VarOptSample":
        return VarOptSample(self.k, self.key_type)

    def _serde(self):
        return _VAROPT_SERDES[self.key_type or "float"]()

    @property
    def nbytes(self) -> int:
        return _HEADER.size + 8 + int(self._sk.get_serialized_size_bytes(self._serde()))

    def to_bytes(self) -> bytes:
        return _pack("varopt", self.key_type, self.k, struct.pack("<d", self._w) + self._sk.serialize(self._serde()))

    @classmethod
    def from_bytes(cls, data) -> "VarOptSample":
        key_type, k, payload = _unpack(data, "varopt", cls.__name__)
        if k < 2 or len(payload) < 8:
            raise SummaryError(f"{cls.__name__}.from_bytes: corrupt header (k={k}, {len(payload)} payload bytes)")
        out = cls(k, key_type)
        (out._w,) = struct.unpack_from("<d", payload)
        out._sk = _deserialize(ds.var_opt_sketch.deserialize, payload[8:], cls.__name__, out._serde())
        if out._sk.k != k:
            raise SummaryError(f"{cls.__name__}.from_bytes: header k={k} but payload k={out._sk.k}")
        return out

    def __repr__(self) -> str:
        return f"VarOptSample(k={self.k}, n={self.n}, key_type={self.key_type!r})"
