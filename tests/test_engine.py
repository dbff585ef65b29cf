"""The engine end to end on a real LocalCluster with worker processes."""

from __future__ import annotations

import dask
import numpy as np
import pytest
from distributed import Client
from scipy.special import expit
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression

import daskabsp
import daskabsp.extension._client
from daskabsp import ABSP, BSP, LogisticGD, fit, slow_workers

C = 1.0


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(n_samples=40_000, n_features=10, n_informative=6,
                               random_state=0)
    return X, y.astype(float)


@pytest.fixture(scope="module")
def big():
    """Partitions large enough (~50 ms of compute each) that every task starts before the
    fastest one finishes, even on a busy 2-core machine."""
    X, y = make_classification(n_samples=800_000, n_features=20, n_informative=10,
                               random_state=1)
    return X, y.astype(float)


def sklearn_optimum(X, y):
    sk = LogisticRegression(C=C, tol=1e-12, max_iter=10_000).fit(X, y)
    w = np.r_[sk.coef_.ravel(), sk.intercept_]
    return LogisticGD(C=C).full_objective(w, X, y)


@pytest.fixture(scope="module")
def optimum(data):
    return sklearn_optimum(*data)


def numpy_gd(X, y, n_iter, C=C):
    """Accelerated gradient descent of LogisticGD, written out in one process."""
    n, d = X.shape
    w = np.zeros(d + 1)
    v = w.copy()
    t = 1.0
    lipschitz = 0.25 * (np.einsum("ij,ij->", X, X) / n + 1.0) + 1.0 / (C * n)
    trace = []
    for _ in range(n_iter):
        trace.append(v.copy())
        r = expit(X @ v[:-1] + v[-1]) - y
        g = np.r_[X.T @ r / n + v[:-1] / (C * n), r.mean()]
        w_next = v - g / lipschitz
        t_next = 0.5 * (1 + np.sqrt(1 + 4 * t * t))
        v = w_next + (t - 1) / t_next * (w_next - w)
        w, t = w_next, t_next
    return w, np.array(trace)


def straggler_partitions(history, address):
    """Partitions whose task ran on ``address`` in every round."""
    on = (history.worker == address).all("round")
    return np.flatnonzero(on.values)


def test_bsp_reproduces_numpy_gradient_descent(client, data):
    X, y = data
    res = fit(LogisticGD(C=C), X, y, sync="bsp", max_iter=25, tol=None, n_partitions=4,
              record_params=True)
    w_ref, trace = numpy_gd(X, y, 25)
    np.testing.assert_allclose(res.history.params.values, trace, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(res.coef, w_ref, rtol=1e-10)
    h = res.history
    assert res.n_iter == 25
    assert dict(h.sizes) == {"round": 25, "partition": 4, "param": 11,
                             "address": len(set(h.worker.values.ravel()))}
    assert (h.worker_rows.sum("address") == h.rows.sum("partition")).all()
    assert (h.rows == h.partition_size).all() and not h.harvested.any()
    assert h.attrs["sync"] == "bsp"


def test_absp_harvests_straggler_and_reaches_optimum(client, big, workers):
    X, y = big
    program = LogisticGD(C=C)
    target = sklearn_optimum(X, y) * (1 + 1e-3)
    slow = workers[0]
    with slow_workers(client, {slow: 8.0}):
        res = fit(program, X, y, sync=ABSP(helpers=False), max_iter=400, tol=None,
                  n_partitions=4,
                  callback=lambda r, w, obj: program.full_objective(w, X, y) <= target)
    h = res.history
    assert not h.helped_rows.any()
    (p,) = straggler_partitions(h, slow)
    rows = h.rows.sel(partition=p).values
    quota = h.quota.sel(partition=p).values
    partial = (rows > 0) & (rows < quota)
    # A task that starts after the round was stopped returns 0 rows at once, by design, and a
    # partition that finishes its quota before the stop reaches it is simply not stopped (e.g.
    # when a pause of the scheduler's process delays the first result). On a quiet machine
    # neither happens to the 8x straggler; under heavy outside load both can.
    first_finish = h.task_stop.where(~h.harvested).min("partition").values
    start, stop = (h[v].sel(partition=p).values for v in ("task_start", "task_stop"))
    stop_sent = h.stop_time.values
    assert np.isfinite(stop_sent).all()
    assert (stop_sent >= first_finish - 0.05).all()  # the stop follows the first finish
    late = (rows == 0) & (np.isnan(start) | (start >= first_finish))  # NaN: reported idle
    in_time = (rows == quota) & (stop <= stop_sent + 0.05)  # done before the stop could arrive
    bad = np.flatnonzero(~(partial | late | in_time)[1:]) + 1
    assert bad.size == 0, f"rounds {bad} of {res.n_iter}: rows {rows[bad]}"
    assert partial[1:].mean() >= 0.8, rows
    stopped = ~in_time[1:]
    assert h.harvested.sel(partition=p).values[1:][stopped].all()
    np.testing.assert_array_equal(h.counted.sel(partition=p).values[1:], rows[1:] > 0)
    # the straggler resumes where it stopped
    cur = h.cursor.sel(partition=p).values
    n_p = int(h.partition_size[p])
    np.testing.assert_array_equal(cur[1:], (cur[:-1] + rows[:-1]) % n_p)
    assert np.nanmedian(h.harvest_latency.values) < 0.5
    assert program.full_objective(res.coef, X, y) <= target, res.n_iter


def test_helpers_take_over_the_stragglers_rows_once_a_copy_exists(client, big, workers):
    """A worker slowed from the first round: round 0 harvests its partial rows (no copy
    exists yet, so what it left is counted next round, as published, rather than given back
    to it); its partition is copied, and from then on helpers scan what it leaves, split by
    measured speed: its share of the rows follows its speed."""
    X, y = big
    program = LogisticGD(C=C, helpers=True)
    slow = workers[0]
    with slow_workers(client, {slow: 8.0}):
        res = fit(program, X, y, sync="absp", max_iter=8, tol=None, n_partitions=4)
    h = res.history
    assert h.attrs["replicas"] == 1
    p = int(np.flatnonzero((h.worker == slow).values[0])[0])  # the slow worker's partition
    rows0 = int(h.rows.values[0, p])
    assert h.harvested.values[0, p] and 0 < rows0 < int(h.quota.values[0, p])
    assert h.counted.values[0, p] and h.helped_rows.values[0, p] == 0
    helped = np.flatnonzero(h.helped_rows.values[:, p] > 0)
    assert helped.size >= 3, h.helped_rows.values  # once copied, helped round after round
    assert (h.rows.values[helped, p] == h.quota.values[helped, p]).all()
    share = (h.worker_rows.sel(address=slow) / h.worker_rows.sum("address")).values
    # An 8x slower worker of 4 scans 1/25 of the rows when rows follow speed; 1/4 without.
    assert np.median(share[helped]) < 0.25, share
    np.testing.assert_array_equal(h.worker_rows.sum("address"), h.rows.sum("partition"))
    # every row is counted at most once a round, and the cursor moves past exactly those
    assert (h.rows <= h.quota).all()
    cur, rows, n_p = h.cursor.values, h.rows.values, h.partition_size.values
    np.testing.assert_array_equal(cur[1:], (cur[:-1] + rows[:-1]) % n_p)


@pytest.mark.parametrize("setting", [{"distributed.worker.memory.target": 1e-4},
                                     {"daskabsp.copy-memory": 1.25}])
def test_no_copy_is_made_past_a_workers_memory_room(client, big, workers, setting):
    """A copy that would take a worker's managed memory past the fraction of its memory
    limit where Dask starts spilling (the copy would slow the worker it was meant to help),
    or its fit data past ``daskabsp.copy-memory`` times the most a worker holds of the fit's
    partitions (here one each), is not made: the straggler's leftovers are counted next
    round, as published, no worker holds more than its own partition, and the history says
    why."""
    X, y = big
    slow = workers[0]
    with slow_workers(client, {slow: 8.0}), dask.config.set(setting):
        res = fit(LogisticGD(C=C, helpers=True), X, y, sync="absp", max_iter=6, tol=None,
                  n_partitions=4)
    h = res.history
    assert (h.helped_rows.values == 0).all(), h.helped_rows.values
    assert h.harvested.values[1:].any()  # there were leftovers a copy would have helped with
    assert "not copied for helpers: no worker without it has room" in " ".join(
        str(e) for e in h.events.values)
    assert h.attrs["max_worker_data_bytes"] < 1.5 * X.nbytes / 4


def test_copy_memory_leaves_room_for_one_copy_of_a_quarter_share(client, big, workers):
    """Four partitions per worker under ``daskabsp.copy-memory: 1.25``: each worker has
    room for one copy, so the slow worker's partitions are still helped from copies, and no
    worker holds more than 1.25x the most a worker holds of its own partitions."""
    X, y = big
    with slow_workers(client, {workers[0]: 8.0}), \
            dask.config.set({"daskabsp.copy-memory": 1.25}):
        res = fit(LogisticGD(C=C, helpers=True), X, y, sync="absp", max_iter=8, tol=None,
                  n_partitions=16)
    h = res.history
    assert h.helped_rows.values.sum() > 0, h.helped_rows.values
    own = 4 * (X.nbytes + y.nbytes) / 16  # a worker's four partitions
    assert h.attrs["max_worker_data_bytes"] <= 1.25 * own * 1.001


def test_drop_discards_straggler_statistics_and_keeps_cursor(client, big, workers):
    X, y = big
    slow = workers[0]
    with slow_workers(client, {slow: 8.0}):
        res = fit(LogisticGD(C=C), X, y, sync=ABSP(on_quorum="drop"), max_iter=8, tol=None,
                  n_partitions=4)
    h = res.history
    (p,) = straggler_partitions(h, slow)
    stopped = h.harvested.values
    # the slowed partition is the one stopped (timing-dependent only under heavy load)
    assert stopped[1:, p].mean() >= 0.5
    # exactly the partitions that finished are counted; a stopped one keeps its cursor
    np.testing.assert_array_equal(h.counted.values, ~stopped)
    cur, rows, n_p = h.cursor.values, h.rows.values, h.partition_size.values
    expected = np.where(stopped[:-1], cur[:-1], (cur[:-1] + rows[:-1]) % n_p)
    np.testing.assert_array_equal(cur[1:], expected)


def test_quorum_n_matches_bsp(client, data):
    X, y = data
    kw = dict(max_iter=10, tol=None, n_partitions=4, record_params=True)
    a = fit(LogisticGD(C=C), X, y, sync=BSP(), **kw)
    b = fit(LogisticGD(C=C), X, y, sync=ABSP(quorum=4), **kw)
    # Chunk sizes come from measured speed, so the two fits may sum their rows in other
    # chunks: equal up to rounding, not bit for bit.
    np.testing.assert_allclose(b.history.params.values, a.history.params.values, rtol=1e-10)
    assert not b.history.harvested.any()


def test_unstarted_tasks_return_zero_rows_at_once(client, big, workers):
    X, y = big
    # 8 partitions on 4 single-thread workers, all but one slowed: each slowed worker is still
    # computing its first task when the fast worker finishes, so its second has not started.
    # (With equal workers the others may finish their first task before the stop reaches them.)
    with slow_workers(client, {w: 8.0 for w in workers[1:]}):
        res = fit(LogisticGD(C=C), X, y, sync=ABSP(helpers=False), max_iter=12, tol=None,
                  n_partitions=8)
    h = res.history
    zero = (h.rows == 0).values
    assert zero[1:].sum(axis=1).min() >= 1
    assert (h.compute_seconds.values[zero] < 0.05).all()
    # Their workers reported them idle, and the round did not wait for them: no start time.
    # Not in every round: once in the full suite on CI a round had none (cause not found; not
    # reproduced in 66 rounds alone), so this asks for most rounds.
    idle = np.isnan(h.task_start.values)
    assert idle[1:].any(axis=1).mean() >= 0.8
    assert zero[idle].all() and not h.counted.values[idle].any()
    assert (h.worker.values[idle] != "").all()
    # partitions that got nothing go first next round: none starves
    assert (h.rows.sum("round") > 0).all()


def _hold(started: str, release: str) -> bool:
    from distributed import Event

    Event(started).set()
    return Event(release).wait(timeout=60)


def test_absp_round_does_not_wait_for_a_task_queued_behind_another_job(client, data, workers):
    """A busy neighbour: another job's task holds worker 0's only thread, so the fit's
    partition there queues behind it. A-BSP ends every round without it (BSP would wait), and
    its helpers scan that partition's rows from the copy on another worker, giving the busy
    worker none of them."""
    import uuid

    from distributed import Event

    X, y = data
    name = uuid.uuid4().hex[:8]
    started, release = Event(f"started-{name}"), Event(f"release-{name}")
    blocker = client.submit(_hold, started.name, release.name, workers=[workers[0]],
                            pure=False)
    try:
        assert started.wait(timeout=60)
        # (small data: helpers run however little is left)
        with dask.config.set({"daskabsp.help-above": 0}):
            res = fit(LogisticGD(C=C, helpers=True), X, y, sync="absp", max_iter=6, tol=None,
                      n_partitions=4)
        # the fit finished while the neighbour's task still held worker 0
        assert not blocker.done()
    finally:
        release.set()
    assert blocker.result() is True
    h = res.history
    on_busy = (h.worker == workers[0]).values
    # Now and then work stealing moves that round's partition to a free worker before the
    # stop (the fit is fine with that; stealing cannot be paused here, as the fit's data
    # placement needs it to get around the blocked worker). Without the idle reports every
    # round would wait for stealing to move it.
    assert on_busy.sum(axis=1).max() == 1
    assert on_busy.any(axis=1).sum() >= res.n_iter - 1
    assert np.isnan(h.task_start.values[on_busy]).all()
    # Its partition has no copy at first, so it waits; once copied to a free worker, the
    # helpers scan it there, and the busy worker scans none of the rows.
    assert (h.rows.values <= h.quota.values).all()
    assert (h.helped_rows.values[on_busy] == h.rows.values[on_busy]).all()
    # some round counted every row (a copy made mid-fit may land after a round's plan: not
    # necessarily the last one)
    assert (h.rows_total.values == int(h.partition_size.sum())).any()
    busy_rounds = on_busy.any(axis=1)
    assert (h.worker_rows.sel(address=workers[0]).values[busy_rounds] == 0).all()

def test_concurrent_bsp_and_absp_fits_do_not_stop_each_other(cluster, big, workers):
    import asyncio

    from distributed import Client

    X, y = big

    async def both():
        async with Client(cluster.scheduler_address, asynchronous=True,
                          set_as_default=False) as c:
            prog = LogisticGD(C=C)
            plugin = daskabsp.SlowWorkers({workers[0]: 8.0})
            await c.register_plugin(plugin)
            try:
                return await asyncio.gather(
                    fit(prog, X, y, sync="bsp", max_iter=10, tol=None, n_partitions=4,
                        client=c),
                    fit(prog, X, y, sync="absp", max_iter=10, tol=None, n_partitions=4,
                        client=c),
                )
            finally:
                await c.unregister_worker_plugin(plugin.name)

    bsp, absp = asyncio.run(both())
    assert not bsp.history.harvested.any()
    assert (bsp.history.rows == bsp.history.partition_size).all()
    assert np.isnan(bsp.history.stop_time).all()  # BSP rounds are never stopped
    assert absp.history.harvested.any()


def test_history_round_trips_through_netcdf(client, data, tmp_path):
    import xarray as xr

    X, y = data
    res = fit(LogisticGD(C=C), X, y, max_iter=3, tol=None, n_partitions=4)
    path = tmp_path / "history.nc"
    res.history.to_netcdf(path)
    with xr.open_dataset(path) as back:
        xr.testing.assert_identical(back.load(), res.history)
    assert res.history.attrs["program"] == "logreg"
    assert res.history.attrs["sync"] == "absp"


def test_recorded_params_are_the_coefficients_each_round_was_taken_at(client, data):
    """``record_params=True`` with a Newton program (whose task parameters are a tuple):
    round r's params are the coefficients after round r - 1's update, flattened."""
    from daskabsp.programs import LinearNewton, MultinomialNewton

    X, y = data
    for program, K in ((LinearNewton(l2=1e-3), 1), (MultinomialNewton(n_classes=2, l2=1e-3), 2)):
        res = fit(program, X, y, sync="bsp", max_iter=3, tol=None, n_partitions=2,
                  record_params=True)
        P = res.history.params.values
        assert P.shape == (3, K * (X.shape[1] + 1))
        assert not P[0].any() and P[1].any()  # from zero, then the first step
        assert not np.array_equal(P[2], P[1])


def test_tol_stops_early(client, data):
    X, y = data
    res = fit(LogisticGD(C=C), X, y, sync="bsp", max_iter=500, tol=1e-3, n_partitions=4)
    assert res.converged and res.n_iter < 500
    obj = res.history.objective.values
    assert abs(obj[-1] - obj[-2]) <= 1e-3 * abs(obj[-2])


def test_sparse_input_matches_dense(client, data):
    import scipy.sparse as sp

    X, y = data
    kw = dict(sync="bsp", max_iter=5, tol=None, n_partitions=4)
    dense = fit(LogisticGD(C=C), X, y, **kw)
    sparse = fit(LogisticGD(C=C), sp.csr_matrix(X), y, **kw)
    np.testing.assert_allclose(sparse.coef, dense.coef, rtol=1e-10)


def test_dask_input_keeps_its_chunks(client, data):
    import dask.array as da

    X, y = data
    Xd = da.from_array(X, chunks=(10_000, 5))
    yd = da.from_array(y, chunks=10_000)
    res = fit(LogisticGD(C=C), Xd, yd, sync="bsp", max_iter=5, tol=None)
    assert res.history.sizes["partition"] == 4
    ref = fit(LogisticGD(C=C), X, y, sync="bsp", max_iter=5, tol=None, n_partitions=4)
    np.testing.assert_allclose(res.coef, ref.coef, rtol=1e-10)


def test_driver_signal_fallback_still_harvests(client, big, workers):
    import dask

    X, y = big
    daskabsp.extension._client._ready.pop(client.id, None)
    try:
        with dask.config.set({"daskabsp.signal": "driver"}), \
                slow_workers(client, {workers[0]: 8.0}):
            res = fit(LogisticGD(C=C), X, y, sync="absp", max_iter=6, tol=None,
                      n_partitions=4)
    finally:
        daskabsp.extension._client._ready.pop(client.id, None)
    h = res.history
    (p,) = straggler_partitions(h, workers[0])
    # the driver's stop takes one more hop: on a very busy machine the 8x straggler may now
    # and then finish first
    assert h.harvested.sel(partition=p).values[1:].mean() >= 0.8
    assert "harvest_latency" not in h and "stop_time" not in h


def test_plugin_forgets_finished_rounds(client, data):
    X, y = data
    fit(LogisticGD(C=C), X, y, max_iter=3, tol=None, n_partitions=4)
    fit(LogisticGD(C=C), X, y, sync="absp", max_iter=3, tol=None, n_partitions=8)

    def state(dask_scheduler):
        p = dask_scheduler.plugins["daskabsp"]
        waiting = len(p._announced) + len(p._settled)
        return len(p.registry.rounds), len(p.registry.key_round) + waiting

    # Round keys are released when the fit ends and the scheduler forgets them asynchronously:
    # wait for that condition (bounded), not for a fixed time.
    import time

    deadline = time.monotonic() + 10
    while client.run_on_scheduler(state) != (0, 0):
        assert time.monotonic() < deadline, client.run_on_scheduler(state)
        time.sleep(0.05)
    # no idle report is left waiting for a task to end
    assert set(client.run(_held_reports).values()) == {0}


def _held_reports(dask_worker) -> int:
    return len(dask_worker.extensions["daskabsp"]._held)


@pytest.mark.parametrize("signal", ["scheduler", "driver"])
def test_patience_lets_a_slightly_slow_worker_finish_and_published_stops_it(
        cluster, client, big, workers, signal):
    """A worker 1.3x slower is no straggler worth leaving behind: with patience its rounds
    count every row (nothing harvested), on either stop path; without, it is harvested."""
    X, y = big
    kw = dict(max_iter=6, tol=None, n_partitions=4)
    with dask.config.set({"daskabsp.signal": signal}), Client(cluster) as c, \
            slow_workers(c, {workers[0]: 1.3}):
        patient = fit(LogisticGD(C=C), X, y, client=c, **kw,
                      sync=ABSP(helpers=False, grace=0.0, patience=9.0))
        hasty = fit(LogisticGD(C=C), X, y, client=c, **kw,
                    sync=ABSP(helpers=False, grace=0.0, patience=0.0))
    # from round 1: round 0 is the workers' cold start, where one task can take 10x another
    # (seen once in a loaded full-suite run)
    h = patient.history.isel(round=slice(1, None))
    assert not h.harvested.any() and (h.rows == h.partition_size).all()
    assert hasty.history.harvested.isel(round=slice(1, None)).any()
