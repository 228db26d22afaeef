"""The closure's executor-side step: connected components of one partition's edges.

``local_roots`` runs in ``DataFrame.mapInArrow`` over integer edges ``(a, b)``: it
numbers the partition's ids with ``numpy.unique`` (sorted, so the smallest id of a
component is its first index), labels them with scipy's ``connected_components``
(one linear pass, native code) and returns ``(x, p)`` for every id ``x`` that is not
the smallest of its component ``p``. What it holds is one partition: memory is
bounded by the partition's size, never by the graph's.

Two uses in ``closure._distributed_components``:

* on every partition of the graph (no shuffle), its output *replaces* the edges: one
  star per local component, the same connectivity with the local diameters gone and
  duplicate and cycle edges dropped;
* on the whole remaining graph in one partition once it has at most
  ``max_task_edges`` edges, its output is every remaining node's final parent.
"""

from __future__ import annotations

from collections.abc import Iterator

# rows per output Arrow batch
BATCH_ROWS = 1 << 20
# the schema of local_roots' output
ROOTS_SCHEMA = "x long, p long"


def local_roots(batches: Iterator) -> Iterator:
    """``(x, p)``: each id of the batches' edges ``(a, b)`` that is not the smallest of
    its component there, with that smallest id ``p`` (so ``p < x``)."""
    import numpy as np
    import pyarrow as pa
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    sources, targets = [], []
    for batch in batches:
        sources.append(batch.column(0).to_numpy(zero_copy_only=False))
        targets.append(batch.column(1).to_numpy(zero_copy_only=False))
    edges = sum(len(s) for s in sources)
    if edges == 0:
        return
    ends = np.concatenate(sources + targets).astype(np.int64, copy=False)
    ids, codes = np.unique(ends, return_inverse=True)
    n = len(ids)
    graph = coo_matrix(
        (np.ones(edges, dtype=np.int8), (codes[:edges], codes[edges:])), shape=(n, n)
    )
    _, labels = connected_components(graph, directed=False)
    # ids are sorted: the first index of each label is its component's smallest id
    _, first = np.unique(labels, return_index=True)
    roots = ids[first[labels]]
    moved = np.flatnonzero(roots != ids)
    for start in range(0, len(moved), BATCH_ROWS):
        chunk = moved[start : start + BATCH_ROWS]
        yield pa.RecordBatch.from_arrays(
            [pa.array(ids[chunk], pa.int64()), pa.array(roots[chunk], pa.int64())],
            names=["x", "p"],
        )
