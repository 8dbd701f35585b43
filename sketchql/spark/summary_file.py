"""The ``.sqs`` summary file: a JSON header plus the summary's own bytes.

    b"SQSF" | u16 format | u32 header length | header (UTF-8 JSON) | payload

The header says what the payload is (``kind``: ``countsketch`` or ``index``)
and carries the build's stats (rows, null keys, time range, declaration...).
The payload is exactly ``CountSketch.to_bytes()`` or ``StreamIndex.to_bytes()``,
so a file written by Spark and one written in a single process for the same
data are byte-identical whenever those payloads are.

>>> import numpy as np
>>> from sketchql.summaries import CountSketch
>>> cs = CountSketch(d=3, w=64, seed=1).update(np.arange(10))
>>> obj, meta = decode_summary(encode_summary(cs, {"name": "s"}))
>>> obj == cs, meta["kind"], meta["name"]
(True, 'countsketch', 's')
"""
from __future__ import annotations

import json
import struct

from ..errors import SummaryError
from ..summaries import CountSketch

_MAGIC = b"SQSF"
_FORMAT = 1
_HEAD = struct.Struct("<4sHI")


def summary_kind(obj) -> str:
    if isinstance(obj, CountSketch):
        return "countsketch"
    if type(obj).__name__ == "StreamIndex":
        return "index"
    raise SummaryError(f"summary file: cannot store a {type(obj).__name__}")


def encode_summary(obj, meta: dict | None = None) -> bytes:
    """Serialize a CountSketch / StreamIndex with a JSON header of ``meta``."""
    header = dict(meta or {})
    header["kind"] = summary_kind(obj)
    hb = json.dumps(header, sort_keys=True).encode("utf-8")
    return _HEAD.pack(_MAGIC, _FORMAT, len(hb)) + hb + obj.to_bytes()


def decode_header(data: bytes) -> tuple[dict, int]:
    if len(data) < _HEAD.size:
        raise SummaryError(f"summary file: {len(data)} bytes is too short to be a sketchql summary")
    magic, fmt, hlen = _HEAD.unpack_from(data)
    if magic != _MAGIC:
        raise SummaryError(f"summary file: not a sketchql summary (magic {magic!r})")
    if fmt != _FORMAT:
        raise SummaryError(f"summary file: unsupported format version {fmt}")
    try:
        meta = json.loads(data[_HEAD.size:_HEAD.size + hlen].decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise SummaryError(f"summary file: corrupt header ({exc})") from None
    return meta, _HEAD.size + hlen


def decode_payload(kind: str, payload: bytes):
    if kind == "countsketch":
        return CountSketch.from_bytes(payload)
    if kind == "index":
        from ..index import StreamIndex  # the index room; imported only when needed
        return StreamIndex.from_bytes(payload)
    raise SummaryError(f"summary file: unknown summary kind {kind!r}")


def decode_summary(data: bytes):
    """(summary object, header dict) of an encoded summary file."""
    meta, off = decode_header(data)
    return decode_payload(meta.get("kind"), data[off:]), meta
