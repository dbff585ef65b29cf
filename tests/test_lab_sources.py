"""The straggler lab's sources: each slows what it should, and cleans up after itself.

Measured on a real LocalCluster with one worker process per core (2 on the test machine): the
compute seconds of the partitions in BSP histories, compared side by side with a generous
margin (no absolute timings).

A neighbour saturates its core, so the operating system moves every other thread that may run
anywhere (the driver's and schedulers' threads in this process, the suite's other clusters,
other tenants of the machine: ~0.2 of a core in the full suite) to the other core, where it
slows the partition the neighboured one is compared with, by 20%-40% in the full suite: the
margins leave room for that. The neighbour tests compare partitions within one fit (what
changes between fits cancels), on scans long enough (~0.12 s per partition and round) that a
round's slowdown is the core's share and not how a few scheduler slices fell.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys

import numpy as np
import psutil
import pytest
import scipy.sparse as sp
from distributed import Client, LocalCluster

import daskabsp
from daskabsp import BSP, LogisticGD
from daskabsp.cluster import fast_malloc
from daskabsp.datasets import order_rows, skewed_sparse
from daskabsp.partitions import split_rows
from daskabsp.programs import LloydKMeans
from daskabsp.stragglers import _NEIGHBOUR, cpu_neighbour, pinned_workers

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"),
                                reason="CPU pinning needs os.sched_setaffinity (Linux)")

N_WORKERS = 2  # one per core on the test machine; pinning needs no more workers than cores


@pytest.fixture(scope="module")
def lab():
    """Its own small cluster: workers that can be pinned one per core (with the embedded
    cluster's malloc settings: Dask's make every sparse chunk's temporaries page-fault)."""
    with fast_malloc(), LocalCluster(n_workers=N_WORKERS, threads_per_worker=1, processes=True,
                      dashboard_address=":0", memory_limit="2GiB") as cl, Client(cl) as c:
        c.wait_for_workers(N_WORKERS)
        yield c


@pytest.fixture(scope="module")
def dense():
    """Rows for k-means with many centers: with :data:`NEIGHBOUR_K` centers ~0.12 s of compute
    per partition and round."""
    rng = np.random.default_rng(0)
    return rng.standard_normal((300_000, 20))


#: Centers of the neighbour tests' k-means. With 64 (~40 ms scans) the slowdown of a
#: neighboured scan varied from round to round between 0.6x and 2.8x (a scan that short is a
#: few scheduler slices, and how they fall decides), so a median of 4 rounds was now and then
#: near 1; with 256 (~0.12 s scans) it stayed between 2.0x and 2.6x.
NEIGHBOUR_K = 256


def kmeans(n_features: int, k: int = 64) -> LloydKMeans:
    rng = np.random.default_rng(1)
    return LloydKMeans(initial_centers=rng.standard_normal((k, n_features)) * 0.1, tol=0.0)


def thread_affinities(dask_worker=None) -> list[list[int]]:
    """The CPU affinity of every thread of this (worker) process."""
    out = []
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):
            out.append(sorted(os.sched_getaffinity(int(tid))))
    return out


def affinities(client) -> dict[str, set[tuple[int, ...]]]:
    """Per worker, the distinct affinities of its threads (threads come and go)."""
    return {w: {tuple(a) for a in t} for w, t in client.run(thread_affinities).items()}


def gone(pid: int) -> bool:
    """Whether process ``pid`` no longer exists (nor lingers as a zombie)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def bsp_compute(client, X, rounds: int = 4, k: int = 64) -> tuple[np.ndarray, list[str]]:
    """Per partition, the median compute seconds over the rounds of a BSP k-means fit with
    ``k`` centers (the first round calibrates, so it is left out), and the worker of each
    partition, which is the same in every round."""
    res = daskabsp.fit(kmeans(X.shape[1], k), X, sync=BSP(), max_iter=rounds + 1,
                       n_partitions=N_WORKERS, client=client)
    h = res.history.isel(round=slice(1, None))
    workers = h.worker.values
    assert (workers == workers[0]).all(), workers  # no partition moved to another worker
    return np.median(h.compute_seconds.values, axis=0), [str(w) for w in workers[0]]


def neighboured_ratio(t: np.ndarray, where: list[str], victim: str) -> float:
    """Compute seconds of the partition on ``victim`` over those of the other partition."""
    assert len(where) == N_WORKERS and victim in where, (victim, where)
    p = where.index(victim)
    return float(t[p] / t[1 - p])


def test_pinned_workers_pins_every_thread_and_restores(lab):
    before = affinities(lab)
    with pinned_workers(lab) as cores:
        assert sorted(cores) == sorted(before)
        assert len(set(cores.values())) == N_WORKERS
        inside = affinities(lab)
        for addr, core in cores.items():
            assert inside[addr] == {(core,)}
        # a fit inside (new executor threads included) stays on the pinned core
        daskabsp.fit(LogisticGD(), np.eye(2000, 5), np.arange(2000) % 2, sync="bsp",
                     max_iter=2, client=lab)
        assert affinities(lab) == {w: {(c,)} for w, c in cores.items()}
    assert affinities(lab) == before


def test_cpu_neighbour_slows_its_worker_and_stops(lab, dense):
    """The neighbour on each worker in turn: in the same fit the partition on its worker scans
    much slower than the other (the core is shared: ~2.3x measured), whichever worker it is;
    the neighbour is gone after the block."""
    workers = sorted(affinities(lab))
    ratios = {}
    for victim in workers:
        with cpu_neighbour(lab, victim) as n:
            pids = list(n.pids)
            assert all(psutil.Process(p).cpu_affinity() == [n.core] for p in pids)
            t, where = bsp_compute(lab, dense, rounds=5, k=NEIGHBOUR_K)
        assert all(gone(p) for p in pids)
        assert sorted(where) == workers  # one partition per worker
        ratios[victim] = (neighboured_ratio(t, where, victim), t)
    assert all(r > 1.4 for r, _ in ratios.values()), ratios


def test_duty_cycle_gives_a_partial_share(lab, dense):
    """Two neighbours busy 30% of each period slow their worker's partition, less than two busy
    all the time: measured 1.7x-2.3x and 2.8x-3.6x the other partition's compute in the same
    fit (the full neighbours' ratio 1.4x-1.9x the partial ones').

    Two neighbours, not one: in the full suite the threads of its other clusters and of this
    process (~0.2 of a core) go to the core the neighbours leave free, and slow the other
    partition by 20%-40%: one neighbour's partial share (1.5x alone at duty 0.4) fell to 1.26x.
    """
    before = affinities(lab)
    victim = sorted(before)[0]
    ratios = {}
    for duty in (0.3, 1.0):
        # A period far shorter than a scan (10 ms vs ~0.12 s), so that every scan gets the
        # partial share and not whole busy or idle phases of the neighbours.
        with cpu_neighbour(lab, victim, duty=duty, processes=2, period=0.01):
            t, where = bsp_compute(lab, dense, rounds=5, k=NEIGHBOUR_K)
        ratios[duty] = neighboured_ratio(t, where, victim)
    assert ratios[0.3] > 1.3 and ratios[1.0] > 1.2 * ratios[0.3], ratios
    assert affinities(lab) == before


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_cpu_neighbour_stops_on_error(lab, error):
    before = affinities(lab)
    victim = sorted(before)[1]
    with pytest.raises(error), cpu_neighbour(lab, victim, processes=2) as n:
        pids = list(n.pids)
        assert len(pids) == 2 and not any(gone(p) for p in pids)
        raise error("interrupted")
    assert all(gone(p) for p in pids)
    assert affinities(lab) == before


def test_cpu_neighbour_rejects_bad_arguments(lab):
    victim = sorted(affinities(lab))[0]
    before = affinities(lab)
    with pytest.raises(ValueError, match="duty"), cpu_neighbour(lab, victim, duty=0):
        pass
    with pytest.raises(ValueError, match="processes"), cpu_neighbour(lab, victim, processes=0):
        pass
    with pytest.raises(ValueError, match="No worker"), cpu_neighbour(lab, "tcp://nowhere:1"):
        pass
    assert affinities(lab) == before


def test_neighbour_exits_when_its_parent_dies():
    """A neighbour outlives no one: killed with SIGKILL, its parent cannot stop it, and it
    stops by itself."""
    core = min(os.sched_getaffinity(0))
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys\n"
         f"p = subprocess.Popen([sys.executable, '-c', {_NEIGHBOUR!r}, '{core}', '1.0', '0.05'],"
         " stdout=subprocess.PIPE, text=True)\n"
         "assert p.stdout.readline().strip() == 'ready'\n"
         "print(p.pid, flush=True)\n"
         "sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        assert not gone(pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).wait(timeout=10)
        assert gone(pid)
    finally:
        parent.kill()
        parent.wait()


def test_skewed_sparse_shape():
    X, y = skewed_sparse(40_000, 2000, n_partitions=4, skew=8.0, mean_nnz=20, seed=1)
    nnz = np.diff(X.indptr)
    bounds = np.cumsum([0, *split_rows(40_000, 4)])
    means = [nnz[a:b].mean() for a, b in itertools.pairwise(bounds)]
    assert np.all(np.diff(means) > 0)
    assert 5 < means[-1] / means[0] < 12
    assert 15 < nnz.mean() < 25
    # heavy tail: the densest rows hold many times the median
    assert np.percentile(nnz, 99.9) > 10 * np.median(nnz)
    assert set(np.unique(y)) == {0, 1} and 0.3 < y.mean() < 0.7


def test_skewed_partitions_take_unequal_time(lab):
    X, _ = skewed_sparse(200_000, 2000, n_partitions=N_WORKERS, skew=8.0, mean_nnz=40, seed=2)
    t, _ = bsp_compute(lab, X)
    # partition 1 holds 7-8x the non-zeros of partition 0, on a worker of the same speed
    assert t[1] > 2.0 * t[0], t


@pytest.mark.parametrize("sparse", [False, True])
def test_order_rows_sorts_within_partitions(sparse):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((1001, 4))
    y = rng.integers(0, 2, 1001)
    Xs, ys = order_rows(X if not sparse else sp.csr_matrix(X),
                        y, n_partitions=3)
    Xs = Xs.toarray() if sparse else Xs
    bounds = np.cumsum([0, *split_rows(1001, 3)])
    for a, b in itertools.pairwise(bounds):
        assert np.all(np.diff(ys[a:b]) >= 0)  # sorted by label
        # the same rows, in another order: a partition keeps its rows
        assert sorted(map(tuple, Xs[a:b])) == sorted(map(tuple, X[a:b]))
        # a partial pass (the first quarter) sees one class only
        assert len(np.unique(ys[a:a + (b - a) // 4])) == 1
    Xf, _ = order_rows(X, y, by=2)
    assert np.all(np.diff(Xf[:, 2]) >= 0)
    with pytest.raises(ValueError, match="'by'"):
        order_rows(X, y, by="feature")
