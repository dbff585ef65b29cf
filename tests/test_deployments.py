"""A cluster started as separate processes with the ``dask scheduler`` and ``dask worker``
commands (not ``LocalCluster``), plain TCP and with TLS: fits harvest and reach the optimum,
and the training data never passes through the scheduler."""

from __future__ import annotations

import contextlib
import subprocess
import sys

import numpy as np
import psutil
import pytest
from distributed import Client, Security
from sklearn import linear_model as sk_linear
from sklearn.datasets import make_classification

import daskabsp
from daskabsp.cluster import worker_addresses
from daskabsp.programs import LinearNewton

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")


def _objective(coef, X, y):
    z = X @ coef[:-1] + coef[-1]
    return (np.logaddexp(0, z) - y * z).sum() + 0.5 * coef[:-1] @ coef[:-1]


@contextlib.contextmanager
def cli_cluster(tmp_path, tls: bool):
    """``dask scheduler`` and ``dask worker`` (2 worker processes x 1 thread) started as
    commands; yields a client and the scheduler's pid. Everything is stopped on exit."""
    flags, security = [], None
    if tls:
        tmp = Security.temporary()
        files = {}
        for name, pem in (("ca", tmp.tls_ca_file), ("cert", tmp.tls_scheduler_cert),
                          ("key", tmp.tls_scheduler_key)):
            files[name] = tmp_path / f"{name}.pem"
            files[name].write_text(pem)
        flags = ["--tls-ca-file", str(files["ca"]), "--tls-cert", str(files["cert"]),
                 "--tls-key", str(files["key"])]
        security = Security(tls_ca_file=str(files["ca"]), tls_client_cert=str(files["cert"]),
                            tls_client_key=str(files["key"]), require_encryption=True)
    sched_file = tmp_path / "scheduler.json"
    procs = []
    try:
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--port", "0",
             "--dashboard-address", ":0", "--scheduler-file", str(sched_file),
             *(["--protocol", "tls"] if tls else []), *flags]))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
             str(sched_file), "--nworkers", "2", "--nthreads", "1", "--no-dashboard",
             *flags]))
        with Client(scheduler_file=str(sched_file), security=security, timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
            yield client, procs[0].pid
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
def test_cli_cluster_fits_harvest_and_keep_data_off_the_scheduler(tmp_path, tls):
    X, y = make_classification(200_000, 60, n_informative=20, random_state=0)
    y = y.astype(float)
    ref = sk_linear.LogisticRegression(tol=1e-10, max_iter=1000).fit(X, y)
    best = _objective(np.r_[ref.coef_[0], ref.intercept_], X, y)
    program = LinearNewton(l2=1.0 / len(y), tol=1e-6)
    with cli_cluster(tmp_path, tls) as (client, scheduler_pid):
        address = client.scheduler.address
        assert address.startswith("tls://" if tls else "tcp://")
        scheduler = psutil.Process(scheduler_pid)
        slow = worker_addresses(client)[0]
        # a first small fit installs the plugins (the scheduler imports daskabsp for them)
        daskabsp.fit(program, X[:2000], y[:2000], max_iter=2, tol=None, client=client)
        before = scheduler.memory_info().rss
        with daskabsp.slow_workers(client, {slow: 4.0}):
            fits = {sync: daskabsp.fit(program, X, y, sync=sync, max_iter=50, tol=None,
                                       client=client)
                    for sync in ("bsp", "absp")}
        grown = scheduler.memory_info().rss - before
        for sync, res in fits.items():
            assert res.converged, sync
            assert (_objective(res.coef[0] if res.coef.ndim > 1 else res.coef, X, y)
                    - best) / best <= 1e-6, sync
        h = fits["absp"].history
        assert h.harvested.any() and not fits["bsp"].history.harvested.any()
        # X is 92 MiB and went to the workers at least twice (once per fit, and copies for
        # helpers): none of it through the scheduler
        assert grown < X.nbytes / 4, f"scheduler grew {grown / 2**20:.0f} MiB"
