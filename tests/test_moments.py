"""Bookkeeping of the one-pass, proximal and subspace programs, without a cluster: a pass
stitched from any A-BSP pieces or any order of SSP reports gives the moments of every row
once; the L1 solver's answer satisfies the optimality conditions; stale subspace reports are
dropped."""

from __future__ import annotations

import itertools

import numpy as np
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daskabsp.programs import CovarianceMoments, LeastSquaresMoments, SubspacePCA
from daskabsp.programs.base import PartitionStats
from daskabsp.programs.l1 import kkt_violation, l1_quadratic
from daskabsp.programs.proximal import pseudo_gradient

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def stats_of(program, params, X, y, w, rows):
    acc = program.new_stats(params)
    program.accumulate(acc, program.prepare(params), X[rows], None if y is None else y[rows],
                       None if w is None else w[rows])
    return acc


@st.composite
def data(draw):
    n = draw(st.integers(4, 40))
    d = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * rng.uniform(0.5, 3.0, d) + rng.uniform(-5, 5, d)
    y = X @ rng.standard_normal(d) + rng.standard_normal(n)
    w = rng.uniform(0.1, 2.0, n) if draw(st.booleans()) else None
    sparse = draw(st.booleans())
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=3)))
    return (sp.csr_matrix(X) if sparse else X), y, w, [0, *cuts, n]


def a_bsp_rounds(bounds, draw_rows):
    """Per round, each partition's piece (start, rows, size) from its cursor, cyclically,
    until every partition has wrapped once."""
    sizes = [b - a for a, b in itertools.pairwise(bounds)]
    cursors = [0] * len(sizes)
    wrapped = [False] * len(sizes)
    rounds = []
    while not all(wrapped):
        pieces = []
        for p, size in enumerate(sizes):
            rows = draw_rows(size)
            pieces.append((p, cursors[p], rows, size))
            if cursors[p] + rows >= size:
                wrapped[p] = True
            cursors[p] = (cursors[p] + rows) % size
        rounds.append(pieces)
    return rounds


def piece_stats(program, params, X, y, w, lo, start, rows, size):
    """A scan's statistics, and those up to the partition's last row when it wraps."""
    idx = [lo + (start + i) % size for i in range(rows)]
    full = stats_of(program, params, X, y, w, idx)
    head = None
    if start + rows >= size:
        head = stats_of(program, params, X, y, w, idx[:size - start])
    return PartitionStats(0, start, rows, size, full, head)


@SETTINGS
@given(data(), st.data())
def test_a_pass_stitched_from_partial_rounds_is_the_whole_pass(case, draw):
    """However a straggler's rows are cut into rounds, the moments program solves from
    every row exactly once: the same solution as one round over all rows."""
    X, y, w, bounds = case
    n, d = X.shape
    shift = None if sp.issparse(X) else np.asarray(X[:3].mean(axis=0))
    program = LeastSquaresMoments(l1=0.01, l2=0.1, shift=shift)
    state = program.init(d, n)
    params = program.params(state)
    whole = [PartitionStats(p, 0, b - a, b - a,
                            stats_of(program, params, X, y, w, list(range(a, b))))
             for p, (a, b) in enumerate(itertools.pairwise(bounds))]
    expected = program.update(state, program.combine_round(whole, params), n).solution

    def rows(size):
        return draw.draw(st.integers(1, size), label="rows")

    for pieces in a_bsp_rounds(bounds, rows):
        assert state.solution is None
        parts = []
        for p, start, k, size in pieces:
            if k == 0:
                continue
            ps = piece_stats(program, params, X, y, w, bounds[p], start, k, size)
            parts.append(PartitionStats(p, start, k, size, ps.stats, ps.stats_before_wrap))
        state = program.update(state, program.combine_round(parts, params),
                               sum(x.rows for x in parts))
    assert state.solution is not None
    np.testing.assert_allclose(state.solution.coef, expected.coef, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(state.solution.intercept, expected.intercept, rtol=1e-9,
                               atol=1e-9)


@SETTINGS
@given(data(), st.randoms(use_true_random=False))
def test_ssp_reports_in_any_order_give_the_rounds_moments(case, rnd):
    """SSP/ASP: each partition's report counts once (a repeated report replaces the last),
    the solve waits for every partition, and the order does not matter."""
    X, _y, w, bounds = case
    n, d = X.shape
    program = CovarianceMoments()
    state = program.init(d, n)
    params = program.params(state)
    reports = [PartitionStats(p, 0, b - a, b - a,
                              stats_of(program, params, X, None, w, list(range(a, b))))
               for p, (a, b) in enumerate(itertools.pairwise(bounds))]
    expected = program.update(state, program.combine_round(reports, params), n).solution
    order = reports + rnd.sample(reports, rnd.randint(0, len(reports)))
    rnd.shuffle(order)
    seen = set()
    for rep in order:
        assert (state.solution is None) == (len(seen) < len(reports))
        state = program.partition_update(state, rep, params, 0)
        seen.add(rep.partition)
    np.testing.assert_allclose(state.solution.eigenvalues, expected.eigenvalues, rtol=1e-9,
                               atol=1e-12)
    np.testing.assert_allclose(state.solution.mean, expected.mean, rtol=1e-12, atol=1e-12)


@SETTINGS
@given(st.integers(1, 12), st.integers(0, 2**16), st.sampled_from(["none", "all", "mask"]),
       st.floats(0.0, 2.0))
def test_l1_solution_meets_the_optimality_conditions(m, seed, bound, lam_scale):
    rng = np.random.default_rng(seed)
    B = rng.standard_normal((m, max(1, m - rng.integers(0, 3))))  # possibly singular
    A = B @ B.T + 1e-3 * np.eye(m)
    b = rng.standard_normal(m) * 3
    lam = rng.uniform(0, lam_scale, m)
    # the variables bounded at zero: none, all, or some (a model's coefficients, not its
    # intercept, which must stay free to go negative)
    positive = {"none": False, "all": True, "mask": rng.random(m) < 0.5}[bound]
    x = l1_quadratic(A, b, lam, positive=positive)
    scale = max(np.abs(b).max(), np.diag(A).max(), 1.0)
    assert kkt_violation(x, A @ x - b, lam, positive).max() <= 1e-9 * scale
    mask = np.broadcast_to(positive, (m,))
    assert (x[mask] >= 0).all()
    # a free variable is the unconstrained solution's sign when nothing else binds
    free = ~mask
    if free.all():
        np.testing.assert_allclose(x, l1_quadratic(A, b, lam), atol=1e-8 * scale)


@SETTINGS
@given(st.integers(1, 20), st.integers(0, 2**16))
def test_pseudo_gradient_vanishes_exactly_where_the_optimality_conditions_hold(m, seed):
    rng = np.random.default_rng(seed)
    x = np.where(rng.random(m) < 0.5, 0.0, rng.standard_normal(m))
    lam = rng.uniform(0, 1, m)
    g = rng.standard_normal(m)
    pg = pseudo_gradient(x, g, lam)
    np.testing.assert_allclose(np.abs(pg), kkt_violation(x, g, lam), atol=1e-15)


def test_subspace_drops_reports_of_an_older_basis():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 5))
    program = SubspacePCA(n_components=2, n_oversamples=1)
    state = program.init(5, 30)
    params = program.params(state)
    halves = [PartitionStats(p, 0, 15, 15, stats_of(program, params, X, None, None,
                                                    list(range(15 * p, 15 * p + 15))))
              for p in range(2)]
    state = program.partition_update(state, halves[0], params, 0)
    state = program.partition_update(state, halves[1], params, 0)
    assert state.version == 1 and state.pieces == ()
    stale = program.partition_update(state, halves[0], params, 3)  # taken at version 0
    assert stale.pieces == () and stale.version == 1
    np.testing.assert_array_equal(stale.basis, state.basis)
