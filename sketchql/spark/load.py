"""Load a summary that Spark built: a store directory/URI or one ``.sqs`` file.

>>> # doctest: +SKIP
>>> cs = load_summary("out/")                 # the store's only summary
>>> cs.estimate([42])
>>> idx = load_summary("out/", name="s1")     # a StreamIndex built from CREATE SUMMARY s1
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import SummaryError
from .store import MANIFEST, StoreError, StorePublisher, open_store
from .summary_file import decode_summary


@dataclass
class LoadedSummary:
    """A loaded summary object plus its header (declaration, stats, applied batches)."""

    summary: object
    meta: dict
    source: str


def _split_file(path: str):
    if "://" in path and not path.startswith("file://"):
        root, _, fname = path.rstrip("/").rpartition("/")
        return root, fname
    local = path[len("file://"):] if path.startswith("file://") else path
    return os.path.dirname(os.path.abspath(local)), os.path.basename(local)


def read_summary(path, name: str | None = None) -> LoadedSummary:
    """Read a summary file or the summary ``name`` of a store (see module docstring)."""
    path = os.fspath(path)
    if path.endswith(".sqs"):
        root, fname = _split_file(path)
        data = open_store(root).read(fname)
        obj, meta = decode_summary(data)
        return LoadedSummary(obj, meta, path)
    if "://" not in path and not os.path.exists(path):
        raise StoreError(f"{path!r} does not exist")
    pub = StorePublisher(open_store(path))
    if not pub.store.exists(MANIFEST):
        raise StoreError(f"{path!r} is neither a .sqs file nor a summary store (no {MANIFEST})")
    names = pub.names()
    if name is None:
        if len(names) != 1:
            raise SummaryError(f"store {path!r} holds {len(names)} summaries "
                               f"({', '.join(names) or 'none'}); choose one by name")
        name = names[0]
    loaded = pub.load(name)
    if loaded is None:
        raise SummaryError(f"no summary {name!r} in {path!r} (has {', '.join(names) or 'none'})")
    obj, meta = decode_summary(loaded[0])
    meta = dict(meta, applied_batches=loaded[1].get("applied_batches", []), file=loaded[1].get("file"))
    return LoadedSummary(obj, meta, path)


def load_summary(path, name: str | None = None):
    """The CountSketch / StreamIndex stored at ``path`` (a store or a ``.sqs`` file)."""
    return read_summary(path, name).summary
