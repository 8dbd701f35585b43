"""Summaries the service answers estimates from: Spark-built ones it loaded, and the engine's live indexes.

* ``load(path, name=None, as_name=None)`` reads a summary store directory
  (``manifest.json`` + ``.sqs`` files, as ``sketchql spark-build`` writes
  it) or one ``.sqs`` file, after checking the path: it must exist, lie
  inside ``Limits.summary_roots`` when those are set, be a store (has a
  manifest) or a summary file (starts with the ``SQSF`` magic) no larger than
  ``max_summary_file_bytes``.  URIs other than ``file://`` are accepted only
  when the loader supports them (``fsspec`` installed).
* ``estimate(name, values, t_from, t_to, confidence, attr)``: for a count
  sketch the median-of-rows estimate and ``error_bound(confidence)``
  (k sqrt(F2 / w)); for a :class:`~sketchql.index.StreamIndex` the estimate
  over the time range (t_from, t_to] (default: everything it holds) and its
  per-value bound (edge cells are counted exactly, bound 0).  Live indexes
  (``CREATE SUMMARY`` in the engine) answer the same way, read under the
  service lock.

>>> import numpy as np, os, tempfile
>>> from sketchql.summaries import CountSketch
>>> from sketchql.spark.summary_file import encode_summary
>>> p = os.path.join(tempfile.mkdtemp(), "cs.sqs")
>>> cs = CountSketch(d=3, w=64, seed=1).update(np.array([5, 5, 6]))
>>> _ = open(p, "wb").write(encode_summary(cs, {"name": "cs_item"}))
>>> reg = SummaryRegistry(max_summaries=2, max_file_bytes=10**6, roots=[os.path.dirname(p)])
>>> reg.load(p)["name"]
'cs_item'
>>> reg.estimate_loaded("cs_item", [5, 6, 7])["estimates"][0]["estimate"]
2.0
"""
from __future__ import annotations

import math
import os

import numpy as np

from .errors import ApiError, limit_exceeded, not_found
from .results import json_number

MAGIC = b"SQSF"
AUTO_PREFIX = "_auto_"        # the engine's automatic indexes (engine.index_adapter.declare_auto)


def is_auto_index(name: str) -> bool:
    """Whether a live summary name is one of the engine's automatic indexes (not counted by
    ``max_summaries``; the prefix is refused for ``CREATE SUMMARY``)."""
    return str(name).lower().startswith(AUTO_PREFIX)


def _bad_path(msg: str, path: str) -> ApiError:
    return ApiError(400, "bad_summary_path", msg, path=path)


class SummaryRegistry:
    """Loaded summaries by name (bounded by ``max_summaries``)."""

    def __init__(self, max_summaries: int, max_file_bytes: int, roots=None):
        self.max_summaries = int(max_summaries)
        self.max_file_bytes = int(max_file_bytes)
        self.roots = None if roots is None else [os.path.realpath(os.fspath(r)) for r in roots]
        self.entries: dict = {}

    # -- loading ---------------------------------------------------------------
    def check_path(self, path) -> tuple[str, str]:
        """``(kind, path)`` with kind ``store`` / ``file`` / ``uri``, or a clear :class:`ApiError`."""
        if not isinstance(path, str) or not path.strip():
            raise _bad_path("\"path\" must be a non-empty string (a summary store directory or a .sqs file)",
                            str(path))
        bad = next((i for i, ch in enumerate(path) if ch == "\x00"), None)
        if bad is not None:                    # the OS cannot take it (os.stat: "embedded null byte")
            raise _bad_path(f"\"path\" contains a NUL character (at index {bad}); a file path cannot", path)
        if "://" in path and not path.startswith("file://"):
            raise ApiError(403, "forbidden_path", f"{path!r}: remote URIs cannot be loaded (only files below "
                           f"the configured summary roots)", path=path)
        local = path[len("file://"):] if path.startswith("file://") else path
        real = os.path.realpath(os.path.expanduser(local))
        if self.roots is None:
            raise ApiError(403, "forbidden_path", "no summary roots are configured on this server, so nothing can "
                           "be loaded (start it with --summary-root DIR)", path=path)
        if not any(real == r or real.startswith(r + os.sep) for r in self.roots):
            raise ApiError(403, "forbidden_path", f"{path!r} is outside the directories summaries may be loaded "
                           f"from ({', '.join(self.roots)})", path=path)
        if not os.path.exists(real):
            raise ApiError(404, "not_found", f"summary path {path!r} does not exist", path=path)
        if os.path.isdir(real):
            if not os.path.isfile(os.path.join(real, "manifest.json")):
                raise _bad_path(f"{path!r} is a directory but not a summary store (no manifest.json)", path)
            return "store", real
        if not os.path.isfile(real):
            raise _bad_path(f"{path!r} is not a regular file or directory", path)
        size = os.path.getsize(real)
        if size > self.max_file_bytes:
            raise limit_exceeded(413, "max_summary_file_bytes", size, self.max_file_bytes, f"summary file {path!r}")
        with open(real, "rb") as fh:
            head = fh.read(len(MAGIC))
        if head != MAGIC:
            raise _bad_path(f"{path!r} is not a sketchql summary file (it does not start with {MAGIC!r}); "
                            f"give a .sqs file or a summary store directory", path)
        return "file", real

    def load(self, path, name: str | None = None, as_name: str | None = None, reserved=(),
             check_limit: bool = True, n_live: int | None = None) -> dict:
        from ..errors import SketchQLError
        from ..spark.summary_file import decode_summary

        kind, real = self.check_path(path)
        try:
            if kind == "file":
                with open(real, "rb") as fh:
                    obj, meta = decode_summary(fh.read())
                if name is not None and meta.get("name") not in (None, name):
                    raise ApiError(400, "bad_summary_path", f"{path!r} holds summary {meta.get('name')!r}, "
                                   f"not {name!r}", path=path)
            else:
                if kind == "store":
                    self._check_store_entry(real, name, path)
                from ..spark.load import read_summary
                loaded = read_summary(real, name)
                obj, meta = loaded.summary, loaded.meta
        except ApiError:
            raise
        except SketchQLError as exc:
            raise ApiError(400, type(exc).__name__, str(exc), path=path) from None
        except OSError as exc:
            raise _bad_path(f"{path!r}: cannot read ({exc.strerror or exc})", path) from None
        reg = as_name or meta.get("name") or name or os.path.splitext(os.path.basename(real.rstrip("/")))[0]
        reg = str(reg)
        if reg.lower() in {r.lower() for r in reserved}:
            raise ApiError(409, "name_conflict", f"a live summary is already called {reg!r}; load this one "
                           f"under another name with \"as\"", name=reg)
        # ``reserved``: every live name (for conflicts); ``n_live``: the live ones the limit counts
        # (CREATE SUMMARY, not the engine's automatic indexes; all of ``reserved`` when not given)
        have = len(self.entries) + (len(reserved) if n_live is None else int(n_live))
        if check_limit and reg not in self.entries and have >= self.max_summaries:
            raise limit_exceeded(422, "max_summaries", have + 1, self.max_summaries,
                                 "summaries, created and loaded together (DELETE /summaries/{name} one first)")
        self.entries[reg] = {"summary": obj, "meta": meta, "source": str(path)}
        return self.describe(reg)

    def _check_store_entry(self, real: str, name, path):
        import json

        try:
            with open(os.path.join(real, "manifest.json"), "rb") as fh:
                man = json.loads(fh.read().decode("utf-8"))
        except (OSError, ValueError, RecursionError) as exc:     # ValueError: also UnicodeDecodeError, 4300-digit ints
            raise _bad_path(f"{path!r}: unreadable manifest.json ({type(exc).__name__}: {exc})"[:400], path) from None
        entries = man.get("summaries", {}) if isinstance(man, dict) else {}
        if not isinstance(entries, dict) or not entries:
            raise _bad_path(f"{path!r}: the summary store holds no summaries", path)
        if name is None and len(entries) != 1:
            raise ApiError(400, "ambiguous_summary", f"{path!r} holds {len(entries)} summaries "
                           f"({', '.join(sorted(entries))}); choose one with \"name\"", path=path,
                           choices=sorted(entries))
        if name is not None and name not in entries:
            raise ApiError(404, "not_found", f"no summary {name!r} in store {path!r} (has "
                           f"{', '.join(sorted(entries))})", path=path, name=name)
        entry = entries[name if name is not None else next(iter(entries))]
        size = entry.get("nbytes") if isinstance(entry, dict) else None
        if isinstance(size, int) and size > self.max_file_bytes:
            raise limit_exceeded(413, "max_summary_file_bytes", size, self.max_file_bytes,
                                 f"summary {name!r} of {path!r}")

    def unload(self, name: str) -> None:
        if name not in self.entries:
            raise not_found("summary", name, sorted(self.entries))
        del self.entries[name]

    # -- describing --------------------------------------------------------------
    def describe(self, name: str) -> dict:
        e = self.entries[name]
        obj, meta = e["summary"], e["meta"]
        out = {"name": name, "origin": "loaded", "source": e["source"], "kind": _kind(obj),
               "meta": _jsonable(meta), "nbytes": int(getattr(obj, "nbytes", 0))}
        if hasattr(obj, "total") and not callable(obj.total):
            out["total"] = json_number(obj.total)
        return out

    # -- estimating ----------------------------------------------------------------
    def estimate_loaded(self, name, values, t_from=None, t_to=None, confidence=0.95) -> dict:
        if name not in self.entries:
            raise not_found("summary", name, sorted(self.entries))
        return estimate(self.entries[name]["summary"], name, values, t_from, t_to, confidence)


def _kind(obj) -> str:
    from ..summaries import CountSketch

    kind = getattr(type(obj), "summary_kind", None)     # a read view of an index (engine.index_feed)
    if kind:
        return kind
    return "countsketch" if isinstance(obj, CountSketch) else ("index" if type(obj).__name__ == "StreamIndex"
                                                              else type(obj).__name__)


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, np.generic):
        return _jsonable(x.item())
    return x


def parse_value(text: str, as_type: str | None = None):
    """A query-string value as int, then float, else string (``as_type`` = int|float|str forces one)."""
    if as_type in (None, "auto"):
        for conv in (int, float):
            try:
                v = conv(text)
                if isinstance(v, float) and not math.isfinite(v):
                    continue
                return v
            except ValueError:
                pass
        return text
    conv = {"int": int, "float": float, "str": str}.get(as_type)
    if conv is None:
        raise ApiError(422, "bad_parameter", f"type must be auto, int, float or str, got {as_type!r}",
                       parameter="type")
    try:
        return conv(text)
    except ValueError:
        raise ApiError(422, "bad_parameter", f"value {text!r} is not a valid {as_type}", parameter="value",
                       value=text) from None


def estimate(obj, name, values, t_from=None, t_to=None, confidence=0.95) -> dict:
    """Estimates and error bounds of ``values`` from a CountSketch or StreamIndex."""
    from ..errors import SketchQLError
    from ..summaries import CountSketch

    if not 0 < confidence < 1:
        raise ApiError(422, "bad_parameter", f"confidence must be in (0, 1), got {confidence}",
                       parameter="confidence")
    try:
        if isinstance(obj, CountSketch):
            if t_from is not None or t_to is not None:
                raise ApiError(400, "bad_parameter", f"summary {name!r} is a plain count sketch (no time); "
                               f"t_from / t_to need an index summary", parameter="t_from")
            est = np.asarray(obj.estimate(list(values)), dtype=np.float64)
            bound = np.full(len(values), float(obj.error_bound(confidence)))
        else:
            tf = -np.inf if t_from is None else float(t_from)
            tt = np.inf if t_to is None else float(t_to)
            if not tf < tt:
                raise ApiError(400, "bad_parameter", f"empty time range: t_from={t_from} must be < t_to={t_to}",
                               parameter="t_from")
            est = np.asarray(obj.estimate(list(values), tf, tt), dtype=np.float64)
            bound = np.asarray(obj.error_bound(list(values), tf, tt, confidence), dtype=np.float64)
    except ApiError:
        raise
    except SketchQLError as exc:
        raise ApiError(400, type(exc).__name__, str(exc), name=name) from None
    return {"summary": name, "kind": _kind(obj), "confidence": confidence,
            "t_from": json_number(t_from), "t_to": json_number(t_to),
            "estimates": [{"value": v, "estimate": float(e), "error_bound": float(b),
                           "low": max(float(e) - float(b), 0.0), "high": float(e) + float(b)}
                          for v, e, b in zip(values, est, bound)]}
