"""Engine snapshots: serialize a running :class:`~sketchql.engine.Engine` (and anything holding one)
to bytes and back, so that the restored copy continues *exactly* like the original.

Plain :mod:`pickle` fails on an engine for two reasons, both handled here:

* query plans hold closures (compiled predicates and expressions,
  ``compile_expr.<locals>.col``): they are serialized by value with
  ``cloudpickle`` (same Python version on both ends);
* a :class:`~sketchql.index.StreamIndex` keeps numpy *views* into shared
  buffers (the pyramid's sketch store, the compiled probe view).  Pickle
  copies each view separately, so after a restore a write to the buffer would
  no longer reach its views.  The index and its granularities therefore have
  ``__getstate__`` / ``__setstate__`` that rebind the views to one buffer and
  drop the probe caches built on it.  Its canonical format (``to_bytes``) is
  not used here: it renumbers zones, forgets merged-zone aliases and re-sorts
  cells by timestamp, and a PT join restored from it (``asc`` / ``weighted``)
  answered differently from the original after the next pushes.

* an object whose class forwards unknown attributes (``__getattr__``, e.g. a
  shared operator's per-query handle) would be asked for ``__setstate__``
  while still empty and recurse; such objects are rebuilt with
  ``cls.__new__`` and their ``__dict__`` set directly (the 6-item reduce
  form, so cycles back to them stay intact).

The continuation property -- ``f(restore(snapshot(E)))`` equals ``f(E)``
for every later sequence of pushes ``f`` -- is what the service's crash
recovery relies on (checkpoint + replay of the log's tail); it is tested in
``tests/test_service_durability.py`` against an uninterrupted run, byte for
byte on the summaries.

``next_query_id(engine)`` / ``reserve_query_ids(engine, n)`` read and move
the engine's query-id counter, so that ids are never reused after a restart
and a replayed registration receives the id it had.

>>> from sketchql.engine import Engine
>>> eng = Engine(seed=1)
>>> eng.execute("CREATE STREAM S (k INT) TIMESTAMP ts")
>>> q = eng.register("SELECT k FROM S [RANGE 10] WHERE k > 1")
>>> eng2 = loads(dumps(eng))
>>> for e in (eng, eng2):
...     e.push("S", {"k": [1, 2, 3], "ts": [1.0, 2.0, 3.0]})
>>> [len(e.queries[0].changes()) for e in (eng, eng2)]
[2, 2]
>>> reserve_query_ids(eng2, 10); next_query_id(eng2)
10
"""
from __future__ import annotations

import io
import itertools
import pickle

PROTOCOL = 5


def _pickler_class():
    import cloudpickle

    class _EnginePickler(cloudpickle.Pickler):
        def reducer_override(self, obj):
            cls = type(obj)
            if _forwards_attributes(cls) and isinstance(getattr(obj, "__dict__", None), dict):
                return (cls.__new__, (cls,), dict(obj.__dict__), None, None, _set_dict)
            return super().reducer_override(obj)

    return _EnginePickler


def _forwards_attributes(cls) -> bool:
    """A sketchql class with ``__getattr__`` and no pickling hooks of its own."""
    if not isinstance(cls, type) or not cls.__module__.startswith("sketchql"):
        return False
    own = any("__getattr__" in vars(k) for k in cls.__mro__[:-1])
    hooks = any(h in vars(k) for k in cls.__mro__[:-1] for h in ("__setstate__", "__reduce__", "__reduce_ex__"))
    return own and not hooks


def _set_dict(obj, state):
    obj.__dict__.update(state)
    return obj


def dumps(obj) -> bytes:
    """``obj`` (an Engine, or any structure holding engines, indexes, queries) as bytes."""
    buf = io.BytesIO()
    _pickler_class()(buf, protocol=PROTOCOL).dump(obj)
    return buf.getvalue()


def loads(data: bytes):
    """The object :func:`dumps` serialized (trusted input only: this is pickle)."""
    return pickle.loads(data)


def next_query_id(engine) -> int:
    """The id the engine's next registration will receive (does not consume it)."""
    n = next(engine._ids)
    engine._ids = itertools.count(n)
    return n


def reserve_query_ids(engine, n: int) -> None:
    """Make the next registration receive id ``max(n, next_query_id(engine))`` (ids only grow)."""
    engine._ids = itertools.count(max(int(n), next_query_id(engine)))


def set_next_query_id(engine, n: int) -> None:
    """Make the next registration receive exactly id ``n`` (replaying a logged registration)."""
    engine._ids = itertools.count(int(n))
