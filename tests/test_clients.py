"""The client paths: asynchronous client, no client (embedded cluster), no daskabsp on the
scheduler (the driver sends the stops)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from distributed import Client

from daskabsp import LogisticGD, fit
from daskabsp.cluster import worker_addresses


def _xy(n=20_000, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    return X, (X[:, 0] + 0.3 * rng.standard_normal(n) > 0).astype(float)


def test_asynchronous_client_matches_synchronous(client, cluster):
    X, y = _xy()
    kw = dict(sync="bsp", max_iter=6, tol=None, n_partitions=4)
    sync_res = fit(LogisticGD(), X, y, **kw)

    async def run():
        async with Client(cluster.scheduler_address, asynchronous=True,
                          set_as_default=False) as c:
            coro = fit(LogisticGD(), X, y, client=c, **kw)
            assert asyncio.iscoroutine(coro)
            return await coro

    async_res = asyncio.run(run())
    np.testing.assert_allclose(async_res.coef, sync_res.coef, rtol=1e-12)


def _run_python(code: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.mark.slow
def test_no_client_starts_one_embedded_cluster_and_reuses_it():
    proc = _run_python("""
        import logging
        import numpy as np
        from daskabsp import LogisticGD, fit

        if __name__ == "__main__":
            logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
            rng = np.random.default_rng(0)
            X = rng.standard_normal((5000, 3)); y = (X[:, 0] > 0).astype(float)
            a = fit(LogisticGD(), X, y, max_iter=3, tol=None)
            b = fit(LogisticGD(), X, y, max_iter=3, tol=None)
            print("FITS", a.n_iter, b.n_iter)
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "FITS 3 3" in proc.stdout
    started = [ln for ln in proc.stderr.splitlines() if "started an embedded LocalCluster" in ln]
    assert len(started) == 1, proc.stderr[-3000:]
    assert started[0].startswith("daskabsp.cluster ")


@pytest.mark.slow
def test_scheduler_without_daskabsp_falls_back_to_driver_stops(tmp_path):
    """A scheduler that cannot import daskabsp: the fit warns once and still harvests."""
    sched = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys
            sys.modules["daskabsp"] = None  # as if daskabsp were not installed here
            from distributed.cli.dask_scheduler import main
            sys.argv = ["dask-scheduler", "--port", "0", "--no-dashboard",
                        "--scheduler-file", sys.argv[1]]
            main()
        """), str(tmp_path / "scheduler.json")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    workers = []
    try:
        client = Client(scheduler_file=str(tmp_path / "scheduler.json"), timeout="60s",
                        set_as_default=False)
        for _ in range(2):
            workers.append(subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker",
                 "--scheduler-file", str(tmp_path / "scheduler.json"), "--nthreads", "1",
                 "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        client.wait_for_workers(2, timeout=60)
        X, y = _xy(400_000, 20)
        addr = worker_addresses(client)[0]
        import daskabsp

        with pytest.warns(RuntimeWarning, match="could not install its scheduler plugin"), \
                daskabsp.slow_workers(client, {addr: 8.0}):
            res = fit(LogisticGD(), X, y, max_iter=5, tol=None, n_partitions=2,
                      client=client)
        h = res.history
        slow_parts = np.flatnonzero((h.worker == addr).all("round").values)
        assert slow_parts.size == 1
        assert h.harvested.isel(partition=slow_parts[0]).values[1:].all()
        client.close()
    finally:
        for p in [*workers, sched]:
            p.terminate()
        for p in [*workers, sched]:
            p.wait(timeout=30)
