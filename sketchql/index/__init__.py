"""sketchql.index — the stream intermediate representation (paper section 3).

``CREATE SUMMARY s ON stream(attr) WITH GRANULARITY T1 AND COLLAPSE(rate, depth)``
builds a :class:`StreamIndex`: granularities G1..Gm (|G1| = T1,
|G(i+1)| = rate |G(i)|), each a grid of value buckets x time zones whose
cells hold their tuples (columnar, arrival order) and a count sketch, a
pyramid of merged sketches over each granularity's cells, self-adjusting
zones in G1 (structure T4), COLLAPSE of a whole granularity into one zone of
the next (paper Figure 5), and a query side for the promising-tuple
operators (``promising_regions`` -> ``scan_matching``), with work units.

>>> import numpy as np
>>> decl = SummaryDeclaration("s1", "Store1", "ItemNo", granularity=10.0, rate=2, depth=3)
>>> idx = StreamIndex(decl, IndexConfig(structure="T4", n_buckets=8))
>>> rep = idx.ingest(np.array([1, 2, 1, 1]), np.array([0.5, 1.0, 2.0, 3.0]))
>>> rep.accepted, rep.rejected
(4, 0)
>>> idx.estimate(np.array([1, 2, 3]), 0.0, 3.0).tolist()
[3.0, 1.0, 0.0]
>>> r = idx.promising_regions(np.array([1]), 0.0, 3.0, fade=0.8)
>>> r.granularity.tolist(), r.estimate.tolist()      # two G1 zones (MAXLENGTH = T1/4)
([1, 1], [2.0, 1.0])
>>> idx.scan_matching(int(r.cell[0]), 1, 0.0, 3.0).row_ids.tolist()
[0, 2]
>>> idx.probe_regions(r, np.array([1]), 0.0, 3.0).row_ids.tolist()
[0, 2, 3]
"""
from .declaration import SummaryDeclaration, IndexConfig, STRUCTURES
from .results import IngestReport, Regions, ScanResult, Matches, cell_handle, split_cell
from .stream_index import StreamIndex

__all__ = [
    "SummaryDeclaration", "IndexConfig", "STRUCTURES", "StreamIndex",
    "IngestReport", "Regions", "ScanResult", "Matches", "cell_handle", "split_cell",
]
