"""k-means' numeric kernels: numpy over Arrow batches of feature vectors, the same code in a
Spark task (per partition, through ``mapInArrow``) and on the driver. The plan Spark runs does
not grow with k or the number of features: the centroids travel with the function."""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_BLOCK = 1 << 22  # rows x centroids per block of distances (32 MiB of doubles)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over uint64 values (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def point_hashes(X: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row's values (-0.0 hashes as 0.0): the same point, the same hash,
    wherever it is read and however the input is partitioned."""
    bits = np.ascontiguousarray(X + 0.0).view(np.uint64)
    h = np.zeros(len(X), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(X.shape[1]):
            h = _mix(h ^ (bits[:, j] + _GOLDEN * np.uint64(j + 1)))
    return h


def uniform(hashes: np.ndarray, seed: int, round_: int) -> np.ndarray:
    """A number in (0, 1) per point, a function of (seed, round, the point) only."""
    salt = _mix(np.array([(seed & 0xFFFFFFFFFFFFFFFF) ^ (round_ * 0x632BE59BD9B4E019 & 0xFFFFFFFFFFFFFFFF)],
                         dtype=np.uint64))[0]
    return ((_mix(hashes ^ salt) >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


def exact_d2(X: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Squared Euclidean distance of every row to ``c``, exactly 0 for a row equal to it."""
    diff = X - c
    return np.einsum("ij,ij->i", diff, diff)


def sampling_keys(u: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Efraimidis-Spirakis keys, log(u) / weight: the largest keys are a weighted sample without
    replacement; -inf where the weight is 0 (never drawn)."""
    with np.errstate(divide="ignore"):
        return np.where(weight > 0, np.log(u) / np.where(weight > 0, weight, 1.0), -np.inf)


def best_candidate(X: np.ndarray, hashes: np.ndarray, seed: int, round_: int,
                   d2: np.ndarray | None) -> tuple[float, int] | None:
    """k-means++'s pick among these points for round ``round_`` (Efraimidis-Spirakis weighted
    sampling with weights D(x)^2: the largest log(u) / D(x)^2; the first round: the largest u):
    (key, row) or None when every point is one of the chosen centroids (``d2`` 0)."""
    if len(X) == 0:
        return None
    u = uniform(hashes, seed, round_)
    key = u if d2 is None else sampling_keys(u, d2)
    i = int(np.argmax(key))
    return (float(key[i]), i) if np.isfinite(key[i]) else None


def min_d2(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Squared distance of every row to its nearest row of ``C`` (exactly 0 for a row equal to
    one of them; +inf when ``C`` is empty)."""
    d2 = np.full(len(X), np.inf)
    for c in C:
        np.minimum(d2, exact_d2(X, c), out=d2)
    return d2


def top_distinct(keys: np.ndarray, hashes: np.ndarray, count: int) -> np.ndarray:
    """Rows of the ``count`` largest finite keys among distinct points (by hash: a repeated
    point is one candidate), largest first, ties by hash: the same rows whatever order the
    points come in. Fewer when fewer distinct points have a finite key."""
    finite = np.flatnonzero(np.isfinite(keys))
    take = min(len(finite), max(count, 1) * 4)
    while True:
        if take < len(finite):
            top = finite[np.argpartition(-keys[finite], take - 1)[:take]]
        else:
            top = finite
        top = top[np.lexsort((hashes[top], -keys[top]))]
        _, first = np.unique(hashes[top], return_index=True)
        distinct = top[np.sort(first)]
        # the distinct points among the largest `take` keys are the largest distinct ones only
        # if enough of them were found (or every finite key was looked at)
        if len(distinct) >= count or take >= len(finite):
            return distinct[:count]
        take = min(len(finite), take * 4)


def weighted_plus_plus(X: np.ndarray, weights: np.ndarray, seed: int, k: int, fixed: int,
                       first_round: int) -> list[int] | None:
    """k-means++ over weighted candidates (k-means||'s last step): the rows of ``X`` chosen,
    its first ``fixed`` rows (centroids given) first; each round draws the candidate with the
    largest log(u) / (w D(x)^2) (the first, when nothing is fixed: log(u) / w), u of (seed,
    ``first_round`` + round, the candidate). None when fewer than k candidates can be drawn."""
    hashes = point_hashes(X)
    chosen = list(range(fixed))
    d2 = min_d2(X, X[:fixed]) if fixed else None
    w = weights.astype(np.float64).copy()
    w[:fixed] = 0.0
    for round_ in range(fixed, k):
        key = sampling_keys(uniform(hashes, seed, first_round + round_), w if d2 is None else w * d2)
        i = int(np.argmax(key))
        if not np.isfinite(key[i]):
            return None
        chosen.append(i)
        new = exact_d2(X, X[i])
        d2 = new if d2 is None else np.minimum(d2, new)
    return chosen


def weighted_lloyd(X: np.ndarray, weights: np.ndarray, C: np.ndarray, fixed: int, iterations: int) -> np.ndarray:
    """Lloyd's passes over weighted candidates from centroids ``C`` (k-means||'s refinement),
    moving all but the first ``fixed``; an empty cluster keeps its centroid. Stops when no
    candidate changes cluster."""
    C = C.copy()
    labels = None
    for _ in range(iterations):
        new = nearest(X, C)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        mass = np.bincount(labels, weights=weights, minlength=len(C))
        sums = np.zeros_like(C)
        np.add.at(sums, labels, X * weights[:, None])
        moved = np.flatnonzero(mass > 0)
        moved = moved[moved >= fixed]
        C[moved] = sums[moved] / mass[moved, None]
    return C


def nearest(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Index of each row's nearest centroid (the first of equals), by ||c||^2 - 2 x.c as
    scikit-learn's and MLlib's Lloyd compute it, in blocks of rows."""
    c2 = np.einsum("ij,ij->i", C, C)
    rows = max(1, _BLOCK // max(1, len(C)))
    out = np.empty(len(X), dtype=np.int64)
    for s in range(0, len(X), rows):
        out[s:s + rows] = np.argmin(c2[None, :] - 2.0 * (X[s:s + rows] @ C.T), axis=1)
    return out


def sums_and_counts(X: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster: the sum of its rows (k x d) and its number of rows (k)."""
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    order = np.argsort(labels, kind="stable")
    sums = np.zeros((k, X.shape[1]))
    present = np.flatnonzero(counts)
    if len(present):
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])[present]
        sums[present] = np.add.reduceat(X[order], starts, axis=0)
    return sums, counts


#: rows summed together: a partition's sums are added block by block of this many consecutive
#: rows, whatever batches the rows arrive in, so the bits depend on the rows alone (Spark's
#: default Arrow batch, ``spark.sql.execution.arrow.maxRecordsPerBatch``: a batch is a block,
#: no rows copied)
BLOCK_ROWS = 10_000


def partition_sums(matrices: Iterable[np.ndarray], C: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster, the sum (k x d) and the number (k) of one partition's rows, given in order as
    matrices of any sizes: each block of ``BLOCK_ROWS`` consecutive rows is assigned and summed,
    and the blocks' sums added in order. The same bits from a Spark task's Arrow batches and from
    the partition's rows held by the driver."""
    k = len(C)
    sums, counts = np.zeros((k, dim)), np.zeros(k, dtype=np.int64)
    pending: list[np.ndarray] = []
    held = 0

    def add(block: np.ndarray) -> None:
        s, c = sums_and_counts(block, nearest(block, C), k)
        np.add(sums, s, out=sums)
        np.add(counts, c, out=counts)

    for X in matrices:
        if not len(X):
            continue
        pending.append(X)
        held += len(X)
        if held < BLOCK_ROWS:
            continue
        rows = np.concatenate(pending) if len(pending) > 1 else pending[0]
        full = len(rows) - len(rows) % BLOCK_ROWS
        for start in range(0, full, BLOCK_ROWS):
            add(rows[start:start + BLOCK_ROWS])
        pending, held = ([rows[full:]], len(rows) - full) if full < len(rows) else ([], 0)
    if held:
        add(np.concatenate(pending) if len(pending) > 1 else pending[0])
    return sums, counts


def add_partials(sums: np.ndarray, counts: np.ndarray, at: np.ndarray, part_counts: np.ndarray,
                 part_sums: np.ndarray) -> None:
    """Add the partitions' non-empty clusters (rows in partition order: cluster ``at``, its
    count and sums) into ``sums`` and ``counts``, in that order."""
    np.add.at(counts, at, part_counts)
    np.add.at(sums, at, part_sums)


# -- Arrow ----------------------------------------------------------------------------------------

def matrix(column: Any, dim: int) -> np.ndarray:
    """The rows of a validated list<double> Arrow column as an (n, dim) array."""
    values = column.flatten().to_numpy(zero_copy_only=False)
    return values.reshape(len(column), dim) if dim else np.zeros((len(column), 0))


def inspect_partition(batches: Iterator[Any]) -> Iterator[Any]:
    """One row per partition: its points, their number of features (the first row's), and the
    first bad row of each kind as JSON (a null vector or value, NaN, +-inf, another length):
    ``{"kind": {"feature": j or null, "row": <the row's sample>, "value": ..., "length": ...}}``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n, dim, bad = 0, None, {}
    for batch in batches:
        x, sample = batch.column("__x"), batch.column("__row")
        if batch.num_rows == 0:
            continue
        lengths = pc.list_value_length(x).to_numpy(zero_copy_only=False)  # NaN for a null vector
        nulls = np.asarray(x.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        if "null" not in bad and nulls.any():
            bad["null"] = {"feature": None, "row": sample[int(np.argmax(nulls))].as_py()}
        ok = ~nulls
        if dim is None and ok.any():
            dim = int(lengths[int(np.argmax(ok))])
        ragged = ok & (lengths != (dim if dim is not None else 0))
        if "ragged" not in bad and ragged.any():
            i = int(np.argmax(ragged))
            bad["ragged"] = {"feature": None, "row": sample[i].as_py(), "length": int(lengths[i]), "expected": dim}
        rows = np.flatnonzero(ok & ~ragged)
        if len(rows) and dim:
            sub = x.take(pa.array(rows))
            flat = sub.flatten()
            values = flat.to_numpy(zero_copy_only=False).astype(np.float64).reshape(len(rows), dim)
            null = np.asarray(flat.is_null().to_numpy(zero_copy_only=False)).reshape(len(rows), dim) \
                if flat.null_count else np.zeros(values.shape, dtype=bool)  # a null value reads as NaN
            if "null" not in bad and null.any():
                i, j = np.argwhere(null)[0]
                bad["null"] = {"feature": int(j), "row": sample[int(rows[i])].as_py()}
            for kind, mask in (("nan", np.isnan(values) & ~null), ("inf", np.isinf(values))):
                if mask.any():
                    for j in np.flatnonzero(mask.any(axis=0)):
                        key = f"{kind}:{j}"
                        if key not in bad:
                            i = int(np.argmax(mask[:, j]))
                            bad[key] = {"feature": int(j), "row": sample[int(rows[i])].as_py(),
                                        "value": float(values[i, j])}
        n += batch.num_rows
    yield pa.RecordBatch.from_pydict({"n": [n], "dim": [dim], "bad": [json.dumps(bad, default=str)]},
                                     schema=pa.schema([("n", pa.int64()), ("dim", pa.int32()), ("bad", pa.string())]))
