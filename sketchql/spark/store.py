"""Summary store: where Spark publishes summaries, behind a tiny byte-store API.

Layout of a store (a directory, or a prefix on a shared file system)::

    <root>/manifest.json                 the commit point (written last, atomically)
    <root>/<name>.<version>.sqs          one summary file per summary (current version)

``manifest.json`` holds, per summary, the file of its current version, its
declaration and stats, and the *applied batch ids* of the streaming job that
maintains it.  A publish writes the new summary file under a fresh name first,
then replaces the manifest atomically; only then are older versions deleted.
A crash at any point leaves either the old or the new manifest, each pointing
at a complete file, so readers never see a torn summary and a replayed batch
id is recognised as applied exactly when its summary is visible.

Nothing here assumes a local file system: every byte goes through a
:class:`ByteStore`.  Implemented:

* :class:`LocalStore` -- a POSIX path or ``file://`` URI; atomic publish by
  write-to-temp + ``os.replace`` (rename).  On a cluster this must be a path
  shared by the driver (e.g. an NFS mount); only the driver writes.
* :class:`FsspecStore` -- any other URI (``s3://``, ``hdfs://``, ``gs://``,
  ``abfs://``...) through ``fsspec`` *if it is installed* (it is not a
  dependency of sketchql).  Object stores make a single PUT atomic, so the
  manifest is written in one ``pipe`` call; HDFS renames are atomic.

The :class:`SummaryPublisher` protocol is what the streaming job talks to;
:class:`StorePublisher` (this store) is the implementation today.  A publisher
that pushes to a running sketchql service only has to implement the same three
methods (``applied_batches``, ``publish``, ``load``).

>>> import tempfile
>>> store = open_store(tempfile.mkdtemp())
>>> store.write_atomic("x.bin", b"abc"); store.read("x.bin")
b'abc'
"""
from __future__ import annotations

import json
import os
import uuid
from typing import Protocol, runtime_checkable

from ..errors import SketchQLError

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


class StoreError(SketchQLError, IOError):
    """A summary store could not be read or written."""


class ByteStore:
    """Minimal byte store: relative names under one root."""

    root: str

    def read(self, name: str) -> bytes: raise NotImplementedError
    def write_atomic(self, name: str, data: bytes) -> None: raise NotImplementedError
    def exists(self, name: str) -> bool: raise NotImplementedError
    def delete(self, name: str) -> None: raise NotImplementedError
    def list(self) -> list[str]: raise NotImplementedError

    def uri(self, name: str) -> str:
        return self.root.rstrip("/") + "/" + name


class LocalStore(ByteStore):
    """A directory on a (local or mounted) POSIX file system."""

    def __init__(self, root: str):
        if root.startswith("file://"):
            root = root[len("file://"):]
        self.root = os.path.abspath(root)
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"summary store {self.root!r}: cannot create directory ({exc})") from None

    def _p(self, name: str) -> str:
        return os.path.join(self.root, name)

    def read(self, name: str) -> bytes:
        try:
            with open(self._p(name), "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise StoreError(f"summary store: cannot read {self._p(name)!r} ({exc.strerror or exc})") from None

    def write_atomic(self, name: str, data: bytes) -> None:
        final = self._p(name)
        tmp = os.path.join(self.root, f".{name}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)  # atomic rename on POSIX
        except OSError as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise StoreError(f"summary store: cannot write {final!r} ({exc.strerror or exc})") from None

    def exists(self, name: str) -> bool:
        return os.path.exists(self._p(name))

    def delete(self, name: str) -> None:
        try:
            os.unlink(self._p(name))
        except FileNotFoundError:
            pass

    def list(self) -> list[str]:
        return sorted(n for n in os.listdir(self.root) if not n.startswith("."))


class FsspecStore(ByteStore):
    """Any fsspec URI (s3://, hdfs://, gs://, memory://...); needs ``fsspec``."""

    def __init__(self, uri: str):
        try:
            import fsspec
        except ImportError:
            raise StoreError(f"summary store {uri!r}: remote URIs need the 'fsspec' package "
                             "(pip install fsspec plus s3fs/gcsfs/... for the scheme)") from None
        self.fs, path = fsspec.core.url_to_fs(uri)
        self.root = uri.rstrip("/")
        self._path = path.rstrip("/")
        self.fs.makedirs(self._path, exist_ok=True)

    def _p(self, name: str) -> str:
        return f"{self._path}/{name}"

    def read(self, name: str) -> bytes:
        try:
            return self.fs.cat_file(self._p(name))
        except (OSError, FileNotFoundError) as exc:
            raise StoreError(f"summary store: cannot read {self.uri(name)!r} ({exc})") from None

    def write_atomic(self, name: str, data: bytes) -> None:
        # One PUT is atomic on object stores; on HDFS write a temp then rename.
        if getattr(self.fs, "protocol", None) in ("hdfs", "webhdfs", ("hdfs", "arrow_hdfs")):
            tmp = self._p(f".{name}.{uuid.uuid4().hex}.tmp")
            self.fs.pipe_file(tmp, data)
            self.fs.mv(tmp, self._p(name))
        else:
            self.fs.pipe_file(self._p(name), data)

    def exists(self, name: str) -> bool:
        return self.fs.exists(self._p(name))

    def delete(self, name: str) -> None:
        if self.fs.exists(self._p(name)):
            self.fs.rm(self._p(name))

    def list(self) -> list[str]:
        return sorted(p.rsplit("/", 1)[-1] for p in self.fs.ls(self._path, detail=False)
                      if not p.rsplit("/", 1)[-1].startswith("."))


def open_store(uri) -> ByteStore:
    """A :class:`ByteStore` for a path or URI (``file://`` / plain path -> local)."""
    if isinstance(uri, ByteStore):
        return uri
    uri = os.fspath(uri)
    if "://" in uri and not uri.startswith("file://"):
        return FsspecStore(uri)
    return LocalStore(uri)


# ---------------------------------------------------------------------------
# applied batch ids, stored compactly as sorted closed ranges [[a, b], ...]
# ---------------------------------------------------------------------------
def ranges_contain(ranges: list, x: int) -> bool:
    return any(a <= x <= b for a, b in ranges)


def ranges_add(ranges: list, x: int) -> list:
    pts = sorted([list(r) for r in ranges] + [[x, x]])
    out: list[list[int]] = []
    for a, b in pts:
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


# ---------------------------------------------------------------------------
@runtime_checkable
class SummaryPublisher(Protocol):
    """Where the streaming job sends updated summaries (exactly-once contract).

    ``applied_batches(name)`` -> sorted closed ranges of batch ids already in
    the published summary; ``publish(name, file_bytes, meta, batch_id)`` makes
    the summary *and* the fact that ``batch_id`` was applied visible in one
    atomic step; ``load(name)`` -> (file_bytes, meta) of the current version or
    None.
    """

    def applied_batches(self, name: str) -> list: ...
    def publish(self, name: str, file_bytes: bytes, meta: dict, batch_id: int | None) -> None: ...
    def load(self, name: str): ...


class StorePublisher:
    """:class:`SummaryPublisher` over a :class:`ByteStore` (manifest + one file per summary)."""

    def __init__(self, store):
        self.store = open_store(store)

    # -- manifest ----------------------------------------------------------
    def manifest(self) -> dict:
        if not self.store.exists(MANIFEST):
            return {"format": MANIFEST_VERSION, "summaries": {}}
        try:
            man = json.loads(self.store.read(MANIFEST).decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise StoreError(f"summary store {self.store.root!r}: corrupt manifest ({exc})") from None
        if man.get("format") != MANIFEST_VERSION:
            raise StoreError(f"summary store {self.store.root!r}: unknown manifest format {man.get('format')!r}")
        return man

    def names(self) -> list[str]:
        return sorted(self.manifest()["summaries"])

    def applied_batches(self, name: str) -> list:
        entry = self.manifest()["summaries"].get(name)
        return [] if entry is None else entry.get("applied_batches", [])

    def load(self, name: str):
        entry = self.manifest()["summaries"].get(name)
        if entry is None:
            return None
        return self.store.read(entry["file"]), entry

    def publish(self, name: str, file_bytes: bytes, meta: dict, batch_id: int | None = None) -> None:
        man = self.manifest()
        old = man["summaries"].get(name, {})
        version = int(old.get("version", 0)) + 1
        fname = f"{name}.{version:08d}.sqs"
        self.store.write_atomic(fname, file_bytes)            # 1. the new version
        applied = old.get("applied_batches", [])
        if batch_id is not None:
            applied = ranges_add(applied, int(batch_id))
        entry = dict(meta, file=fname, version=version, applied_batches=applied, nbytes=len(file_bytes))
        man["summaries"][name] = entry
        self.store.write_atomic(MANIFEST, json.dumps(man, indent=1, sort_keys=True).encode("utf-8"))  # 2. commit
        prefix = f"{name}."
        for other in self.store.list():                       # 3. garbage-collect old versions
            if other.startswith(prefix) and other.endswith(".sqs") and other != fname:
                rest = other[len(prefix):-len(".sqs")]
                if rest.isdigit():
                    self.store.delete(other)
