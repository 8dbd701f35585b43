"""The server's garbage-collection policy: full collections that do not stall result reads.

A full (generation-2) collection of CPython's cyclic collector stops every thread while it
walks every tracked object.  In a running server nearly all of them are long-lived: modules
imported lazily at the first request, compiled kernels' typing objects, the engine's state.
Measured in ``benchmarks/bench_service.py`` (``gc.callbacks``): the tracked set grew from
52k to 237k objects during the run and full collections took 20 -> 100 ms each, the whole
p99 of result reads.

Policy: after each full collection, its survivors -- objects that have already survived
the oldest generation's scan -- are frozen (``gc.freeze``), so the next full collection
walks only what became long-lived since.  Frozen objects are still freed by reference
counting; only garbage *cycles* among them would wait.  When something big is dropped
(a query deregistered, a stream or summary dropped), :func:`release` unfreezes
everything, so the next full collection reclaims such cycles and freezes the survivors
again.

>>> import gc
>>> install(); installed()
True
>>> release(); gc.get_freeze_count() == 0
True
>>> uninstall(); installed()
False
"""
from __future__ import annotations

import gc

__all__ = ["install", "uninstall", "installed", "release"]


def _after_full_collection(phase: str, info: dict) -> None:
    if phase == "stop" and info.get("generation") == 2:
        gc.freeze()


def install() -> None:
    """Collect once, freeze what exists, and freeze the survivors of every later full collection."""
    gc.collect()
    gc.freeze()
    if _after_full_collection not in gc.callbacks:
        gc.callbacks.append(_after_full_collection)


def uninstall() -> None:
    """Back to CPython's default policy (everything unfrozen)."""
    while _after_full_collection in gc.callbacks:
        gc.callbacks.remove(_after_full_collection)
    gc.unfreeze()


def installed() -> bool:
    return _after_full_collection in gc.callbacks


def release() -> None:
    """Something large was dropped: let the next full collection see every object again."""
    if installed():
        gc.unfreeze()
