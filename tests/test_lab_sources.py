"""The straggler lab's sources: each starts where it should, and cleans up after itself.

What each source does to a scan (a neighbour's share of the core, a duty cycle's partial
share, skewed partitions' unequal work) depends on what else runs on the machine: it is
measured by the lab's benchmark, ``benchmarks/lab/lab_sources.py``, with its spread, not
asserted here.
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
from daskabsp import LogisticGD
from daskabsp.cluster import fast_malloc
from daskabsp.engine.partitions import split_rows
from daskabsp.lab.datasets import order_rows, skewed_sparse
from daskabsp.lab.stragglers import _NEIGHBOUR, cpu_neighbour, pinned_workers

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


@pytest.mark.parametrize("duty", [1.0, 0.3])
def test_cpu_neighbour_runs_on_its_workers_core_and_stops(lab, duty):
    """The neighbour on each worker in turn: its processes run pinned to the core that
    worker is pinned to, and are gone after the block."""
    before = affinities(lab)
    for victim in sorted(before):
        with cpu_neighbour(lab, victim, duty=duty, processes=2, period=0.01) as n:
            pids = list(n.pids)
            assert n.worker == victim and n.core == n.cores[victim]
            assert len(set(n.cores.values())) == N_WORKERS  # one core per worker
            assert affinities(lab)[victim] == {(n.core,)}
            assert len(pids) == 2 and not any(gone(p) for p in pids)
            assert all(psutil.Process(p).cpu_affinity() == [n.core] for p in pids)
        assert all(gone(p) for p in pids)
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
