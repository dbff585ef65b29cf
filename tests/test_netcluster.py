"""The namespace cluster (``daskabsp.lab.netcluster``): the scheduler and each worker process in a
network namespace of its own, every link shaped with ``tc``. Transfers are limited to the
configured rate, a fit runs on it, and nothing is left behind: not after the block, not after
an error in it, not after its driver was killed. Needs root, ``ip`` and ``tc``; skipped
otherwise, with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from distributed import Client, wait
from sklearn import linear_model as sk_linear
from sklearn.datasets import make_classification

from daskabsp.estimators import LogisticRegression
from daskabsp.lab.netcluster import (
    PREFIX,
    NetnsUnavailable,
    cleanup_netns,
    netns_cluster,
    parse_rate,
    requirements_missing,
)

_MISSING = requirements_missing()
needs_netns = pytest.mark.skipif(
    bool(_MISSING), reason="a namespace cluster needs " + "; ".join(_MISSING))

RATE = "100mbit"
RATE_BYTES = 100e6 / 8


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "-j", "netns", "list"], capture_output=True, text=True,
                         check=True).stdout.strip()
    return {n["name"] for n in json.loads(out)} if out else set()


def _links() -> set[str]:
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True,
                         check=True).stdout
    return {link["ifname"] for link in json.loads(out)}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _assert_gone(cluster_id: str, pids, timeout: float = 15.0) -> None:
    """Nothing of cluster ``cluster_id`` is left: polls (bounded) for processes a killed
    parent's death signal is still ending."""
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if _alive(p)]
    assert not [n for n in _namespaces() if n.startswith(f"{PREFIX}-{cluster_id}-")]
    assert not [n for n in _links() if n.startswith(f"{PREFIX}{cluster_id}")]


def _random_block(nbytes: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)  # incompressible


def _nbytes(a: np.ndarray) -> int:
    return a.nbytes


def _received(dask_worker) -> list[dict]:
    return list(dask_worker.transfer_incoming_log)


def _objective(est, X, y) -> float:
    z = X @ est.coef_[0] + est.intercept_[0]
    return float((np.logaddexp(0.0, z) - y * z).sum() + 0.5 * est.coef_[0] @ est.coef_[0])


def test_rates_parse_and_bad_ones_say_what_is_accepted():
    assert parse_rate("100mbit") == 10**8
    assert parse_rate("1gbit") == parse_rate("1 Gbit/s") == parse_rate(1e9) == 10**9
    assert parse_rate("1.5kbit") == 1500
    assert parse_rate(None) is None
    for bad in ("fast", "100mbps", "12.5MB", "-1mbit", 0, 10, True, float("nan"), [1]):
        with pytest.raises(ValueError, match=r"like '100mbit'.*Got .* instead"):
            parse_rate(bad)
    with pytest.raises(ValueError, match="'n_workers' parameter"), netns_cluster(0):
        pass


def test_missing_tools_are_named(monkeypatch):
    import shutil

    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda cmd: None if cmd == "tc" else real(cmd))
    with pytest.raises(NetnsUnavailable, match=r"the 'tc' command \(Debian package iproute2\)"), \
            netns_cluster(1):
        pass


@needs_netns
def test_shaped_links_limit_transfers_and_a_fit_runs_then_nothing_is_left():
    X, y = make_classification(20_000, 20, n_informative=10, random_state=0)
    ref = sk_linear.LogisticRegression(solver="newton-cholesky", tol=1e-10,
                                       max_iter=1000).fit(X, y)
    with netns_cluster(2, RATE) as nc, Client(nc.scheduler_address) as client:
        pids = [nc.scheduler_pid, *nc.worker_pids.values()]
        assert sorted(client.run(os.getpid).values()) == sorted(nc.worker_pids.values())
        w0, w1 = nc.worker_addresses
        # 20 MB made on worker 0, then taken by a task on worker 1 (1.6 s at 100 Mbit/s)
        nbytes = 20_000_000
        block = client.submit(_random_block, nbytes, workers=[w0])
        wait(block)
        t0 = time.perf_counter()
        assert client.submit(_nbytes, block, workers=[w1]).result() == nbytes
        seconds = time.perf_counter() - t0
        log = client.run(_received, workers=[w1])[w1]  # worker 1's own timing of the fetch
        assert [e["who"] for e in log] == [w0] and log[0]["total"] >= nbytes
        fetch = log[0]["total"] / log[0]["duration"]
        assert RATE_BYTES / 4 < fetch < 1.5 * RATE_BYTES, fetch
        assert nbytes / seconds < 1.5 * RATE_BYTES, nbytes / seconds  # (plus task overhead)
        # the raw link, the other way round
        raw = nc.measure_throughput("worker-1", "worker-0", 10_000_000)
        assert RATE_BYTES / 2 < raw < 1.5 * RATE_BYTES, raw

        est = LogisticRegression().fit(X, y)  # the scheduler imports daskabsp for its plugin
        best = _objective(ref, X, y)
        assert (_objective(est, X, y) - best) / best <= 1e-4
        cluster_id = nc.id
    _assert_gone(cluster_id, pids)


@needs_netns
def test_an_error_in_the_block_tears_everything_down():
    with pytest.raises(ZeroDivisionError), netns_cluster(1, None) as nc:
        pids = [nc.scheduler_pid, *nc.worker_pids.values()]
        assert all(_alive(p) for p in pids)
        1 / 0  # noqa: B018
    _assert_gone(nc.id, pids)


_DRIVER = """\
import json, sys
from daskabsp.lab.netcluster import netns_cluster
with netns_cluster(1, "1gbit") as nc:
    print(json.dumps([nc.id, nc.scheduler_pid, *nc.worker_pids.values()]), flush=True)
    sys.stdin.readline()
"""


@needs_netns
def test_a_killed_driver_takes_its_processes_along_and_cleanup_removes_the_rest():
    driver = subprocess.Popen([sys.executable, "-c", _DRIVER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        cluster_id, *pids = json.loads(driver.stdout.readline())
    finally:
        driver.kill()
        driver.wait(30)
        driver.stdin.close()
        driver.stdout.close()
    assert any(n.startswith(f"{PREFIX}-{cluster_id}-") for n in _namespaces())
    removed = cleanup_netns()
    assert f"{PREFIX}-{cluster_id}-w0" in removed
    _assert_gone(cluster_id, pids)


def _copy_tasks(dask_scheduler=None) -> list[tuple[str, str]]:
    return sorted((str(k), ts.state) for k, ts in dask_scheduler.tasks.items()
                  if "daskabsp-copy" in str(k))


@needs_netns
def test_a_fits_copies_end_with_it_on_a_shaped_link():
    """Issue 32: on a 100 Mbit/s link every default A-BSP fit returned with its copies still
    crossing the network (``processing`` on the scheduler), and they slowed the next fit
    5-25x. A straggler fit whose copies are started (priced cheap here, so that they are)
    and still crossing the link when it ends leaves no copy task behind, and a link rate
    no higher than those copies managed."""
    import dask
    import dask.array as da

    from daskabsp import LogisticGD, fit, slow_workers
    from daskabsp.engine import placement

    with netns_cluster(2, RATE) as nc, Client(nc.scheduler_address) as client:
        X = da.random.RandomState(0).standard_normal((200_000, 40), chunks=(50_000, 40))
        y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
        X, y = client.persist([X, y])
        wait([X, y])
        slow = {nc.worker_addresses[0]: 8.0}
        # namespace clusters reuse their addresses: forget link rates measured on an earlier
        # one (a measured rate outranks daskabsp.copy-rate, and this test prices copies cheap)
        placement._LINK_RATES.clear()
        # priced cheap, copies start in the first round; this fit ends long before they
        # can cross the link (4 x 16 MB at 12 MB/s)
        with dask.config.set({"daskabsp.copy-rate": "100GiB"}), slow_workers(client, slow):
            fit(LogisticGD(C=1.0, helpers=True), X, y, sync="absp", max_iter=4, tol=None)
        deadline = time.monotonic() + 10
        while client.run_on_scheduler(_copy_tasks) and time.monotonic() < deadline:
            pass  # releases reach the scheduler on the client's batched stream
        assert client.run_on_scheduler(_copy_tasks) == []
        # a copy cut short by the fit's end still bounds the link's rate: the next fit on
        # this cluster prices copies no cheaper than the one that did not land in time
        rate = placement._LINK_RATES.get(nc.scheduler_address)
        assert rate is not None and rate < 1e9, rate
