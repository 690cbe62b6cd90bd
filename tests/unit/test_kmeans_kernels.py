"""k-means||' kernels: the sample does not depend on the points' order, a repeated point is one
candidate, and the weighted k-means++ over candidates keeps the centroids it is given."""

from __future__ import annotations

import numpy as np

from spark_jobs.bodies import kmeans_kernels as K


def _keys(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h = K.point_hashes(X)
    return K.sampling_keys(K.uniform(h, 5, 1 << 20), K.min_d2(X, C)), h


def test_top_distinct_is_the_same_in_any_order_and_counts_a_repeated_point_once():
    rng = np.random.default_rng(1)
    X = np.concatenate([rng.normal(size=(500, 3)), np.repeat(rng.normal(size=(3, 3)), 200, axis=0)])
    C = X[:1]
    keys, h = _keys(X, C)
    top = K.top_distinct(keys, h, 20)
    assert len(top) == 20 and len(set(h[top])) == 20
    assert 0 not in top, "a point equal to a centroid is never drawn"
    assert list(keys[top]) == sorted(keys[top], reverse=True)
    order = rng.permutation(len(X))
    keys2, h2 = _keys(X[order], C)
    assert np.array_equal(X[order][K.top_distinct(keys2, h2, 20)], X[top])
    # mostly one point repeated: the search widens until it has enough distinct ones
    Y = np.concatenate([np.repeat(X[5:6], 5000, axis=0), X[10:40]])
    keys3, h3 = _keys(Y, C)
    assert len(set(h3[K.top_distinct(keys3, h3, 25)])) == 25
    # fewer distinct points than asked: all of them
    Z = np.repeat(X[1:4], 10, axis=0)
    keys4, h4 = _keys(Z, C)
    assert len(K.top_distinct(keys4, h4, 8)) == 3


def test_weighted_plus_plus_keeps_the_fixed_centroids_and_says_when_there_are_too_few():
    X = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0], [10.1, 10.0]])
    w = np.array([0.0, 5.0, 5.0, 5.0, 1.0])
    picked = K.weighted_plus_plus(X, w, seed=3, k=4, fixed=1, first_round=7)
    assert picked[0] == 0 and len(set(picked)) == 4
    assert K.weighted_plus_plus(X, w, seed=3, k=4, fixed=1, first_round=7) == picked, "deterministic"
    assert K.weighted_plus_plus(X[:3], w[:3], seed=3, k=4, fixed=1, first_round=7) is None
    C = K.weighted_lloyd(X, w, X[picked], fixed=1, iterations=30)
    assert np.array_equal(C[0], X[0]), "a fixed centroid does not move"
