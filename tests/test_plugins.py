"""The signal path through a real scheduler: stops, re-sent stops, bookkeeping."""

from __future__ import annotations

import time
import uuid

import dask
import numpy as np
from distributed import Event, secede

from daskabsp import LogisticGD
from daskabsp.engine.partitions import copy_on, place
from daskabsp.extension import COPY_PREFIX
from daskabsp.extension._client import ensure_plugins
from daskabsp.extension._core import run_partition
from daskabsp.extension._protocol import SignalPath


def _after_gate(gate, *args, **kwargs):
    return run_partition(*args, **kwargs)


def _wait_for_event(name: str) -> bool:
    return Event(name).wait(timeout=60)


def _plugin_rounds(dask_scheduler) -> list[str]:
    return list(dask_scheduler.plugins["daskabsp"].registry.rounds)


def _problem(seed: int, n: int = 50_000):
    """Data for partition tasks submitted by hand, and a fresh round: ``X, y, fit_id, rid,
    key prefix``."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 5))
    fit_id = uuid.uuid4().hex[:8]
    return X, (X[:, 0] > 0).astype(float), fit_id, f"{fit_id}:0", f"daskabsp-test-{fit_id}-00000"


def _poll(condition, what: str, timeout: float = 30.0) -> None:
    """Wait until ``condition()`` holds (state on the scheduler that no event announces)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


PROG, PARAMS = LogisticGD(), np.zeros(6)


def test_stop_is_resent_to_a_task_that_starts_after_its_round_stopped(client, workers):
    assert client.sync(ensure_plugins, client) is SignalPath.SCHEDULER
    X, y, fit_id, rid, prefix = _problem(0)
    gate_name = f"gate-{fit_id}"
    kw = dict(round_id=rid, cursor=0, quota=X.shape[0])
    # The gate runs outside the round, on a third worker, and holds b back until a is done.
    gate = client.submit(_wait_for_event, gate_name, workers=[workers[2]], pure=False)
    with dask.annotate(daskabsp={"fit": fit_id, "round": "0", "quorum": 1}):
        a = client.submit(run_partition, PROG, PARAMS, X, y, None, **kw, key=(prefix, 0),
                          workers=[workers[0]])
        b = client.submit(_after_gate, gate, PROG, PARAMS, X, y, None, **kw, key=(prefix, 1),
                          workers=[workers[1]])
    first = a.result()
    assert first.rows == X.shape[0] and not first.stopped
    # a's finish stopped the round while b was still waiting: no worker was running b then.
    assert rid in client.run_on_scheduler(_plugin_rounds)
    Event(gate_name).set()
    late = b.result()
    assert late.rows == 0 and late.stopped
    assert late.worker == workers[1]


def _steal(key, victim: str, thief: str, dask_scheduler=None) -> str:
    ext = dask_scheduler.extensions["stealing"]
    return ext.move_task_request(dask_scheduler.tasks[key], dask_scheduler.workers[victim],
                                 dask_scheduler.workers[thief])


def _round_idle(rid: str, dask_scheduler=None) -> list:
    r = dask_scheduler.plugins["daskabsp"].registry.rounds.get(rid)
    return [] if r is None else list(r.idle)


def test_stop_follows_a_task_stolen_after_its_round_stopped(client, workers, no_stealing):
    """Work stealing moves a queued task without a transition: the plugin re-sends the stop to
    the thief, which never got it (it runs none of the round's other tasks). The steal is
    requested by hand; stealing's own balancing is paused so that it cannot move b first."""
    assert client.sync(ensure_plugins, client) is SignalPath.SCHEDULER
    X, y, fit_id, rid, prefix = _problem(2)
    started, release = f"started-{fit_id}", f"release-{fit_id}"
    kw = dict(round_id=rid, cursor=0, quota=X.shape[0])
    # Another job's task holds workers[1]'s thread, so b queues there behind it.
    blocker = client.submit(_hold, started, release, workers=[workers[1]], pure=False)
    try:
        assert Event(started).wait(timeout=60)
        with dask.annotate(daskabsp={"fit": fit_id, "round": "0", "quorum": 1}):
            a = client.submit(run_partition, PROG, PARAMS, X, y, None, **kw, key=(prefix, 0),
                              workers=[workers[0]])
            b = client.submit(run_partition, PROG, PARAMS, X, y, None, **kw, key=(prefix, 1),
                              workers=[workers[1]], allow_other_workers=True)
        assert a.result().rows == X.shape[0]
        # a's finish stopped the round; workers[1] reported b idle (still queued there)
        _poll(lambda: b.key in client.run_on_scheduler(_round_idle, rid),
              "b was never reported idle")
        client.run_on_scheduler(_steal, b.key, workers[1], workers[2])
        late = b.result(timeout=60)
    finally:
        Event(release, client=client).set()
    assert blocker.result() is True
    assert late.worker == workers[2]  # stolen, and it started after the stop came again
    assert late.rows == 0 and late.stopped


def _hold(started: str, release: str) -> bool:
    Event(started).set()
    return Event(release).wait(timeout=60)


def test_a_task_that_ends_its_round_stops_the_rest_of_it_on_its_worker(client, workers):
    """With a quorum of 1, the task that finishes its quota sets its round's flag on its own
    worker at once: a task of the round queued behind it there returns without a row, with no
    stop from the scheduler (these tasks carry no round annotation, so none is sent)."""
    assert client.sync(ensure_plugins, client) is SignalPath.SCHEDULER
    X, y, *_ = _problem(1, 20_000)
    for ends_round in (True, False):
        rid = f"{uuid.uuid4().hex[:8]}:0"
        kw = dict(round_id=rid, cursor=0, quota=X.shape[0], ends_round=ends_round)
        first = client.submit(run_partition, PROG, PARAMS, X, y, None, **kw,
                              workers=[workers[0]], priority=1, pure=False)
        queued = client.submit(run_partition, PROG, PARAMS, X, y, None, **kw,
                               workers=[workers[0]], pure=False)
        a, b = first.result(), queued.result()
        assert a.rows == X.shape[0] and not a.stopped
        assert b.start >= a.stop  # one thread: b ran after a
        if ends_round:
            assert b.rows == 0 and b.stopped
        else:
            assert b.rows == X.shape[0] and not b.stopped


def test_rounds_of_a_departed_client_are_forgotten(cluster, client):
    from distributed import Client

    assert client.sync(ensure_plugins, client) is SignalPath.SCHEDULER
    fit_id = uuid.uuid4().hex[:8]
    with Client(cluster, set_as_default=False) as other:
        with dask.annotate(daskabsp={"fit": fit_id, "round": "0", "quorum": 0}):
            fut = other.submit(sum, [1, 2], key=(f"daskabsp-test-{fit_id}-00000", 0))
        assert fut.result() == 3
        assert f"{fit_id}:0" in client.run_on_scheduler(_plugin_rounds)
    # close() waits for the scheduler's reply, so remove_client has usually run by now; it
    # gives up after ~2 s, though, which a busy machine can take.
    _poll(lambda: f"{fit_id}:0" not in client.run_on_scheduler(_plugin_rounds),
          "the departed client's round was not forgotten")


def _silent_with_last_seen(dask_scheduler, worker: str, age: float, seconds: float) -> list:
    """The plugin's answer on who is silent for ``seconds``, with ``worker``'s last heartbeat
    set ``age`` seconds back (in the same call: no heartbeat can arrive in between; restored
    after, so that the next tests do not find the worker silent)."""
    ws = dask_scheduler.workers[worker]
    last_seen, ws.last_seen = ws.last_seen, time.time() - age
    try:
        return dask_scheduler.plugins["daskabsp"].silent(list(dask_scheduler.workers), seconds)
    finally:
        ws.last_seen = last_seen


def test_a_worker_is_silent_only_after_three_missed_heartbeats(client, workers):
    """However short ``unresponsive-after`` is set, a worker is named silent only once it has
    missed three of the heartbeats the scheduler asks for (0.5 s apart on a small cluster):
    a shorter threshold would name live workers between two heartbeats."""
    assert client.sync(ensure_plugins, client) is SignalPath.SCHEDULER
    w = workers[0]
    assert client.run_on_scheduler(_silent_with_last_seen, worker=w, age=1.0,
                                   seconds=0.2) == []
    assert client.run_on_scheduler(_silent_with_last_seen, worker=w, age=1.6,
                                   seconds=0.2) == [w]
    assert client.run_on_scheduler(_silent_with_last_seen, worker=w, age=2.5,
                                   seconds=3.0) == []  # the setting, when longer, holds


def _stop_reports(rid: str, keys: list, dask_worker=None) -> list:
    """The idle reports the worker plugin sends for a stop of ``rid`` naming ``keys``
    (captured on the worker's stream, which the call does not yield)."""
    from daskabsp.extension._protocol import IDLE_OP

    sent: list = []
    stream = dask_worker.batched_stream
    real = stream.send
    stream.send = lambda *msgs: sent.extend(msgs)
    try:
        dask_worker.extensions["daskabsp"].stop(rounds=[rid], keys=keys)
    finally:
        stream.send = real
    return [m for m in sent if m.get("op") == IDLE_OP]


def test_a_stop_reports_only_the_tasks_still_queued(client, workers, no_stealing):
    """A worker answers a stop with the named tasks that wait for a thread there; a task that
    already finished, or one it never got, is not reported (its result, if any, is ahead on
    the stream), and a worker with nothing queued sends nothing at all."""
    assert client.sync(ensure_plugins, client) is SignalPath.SCHEDULER
    w = workers[3]
    done = client.submit(sum, [1, 2], workers=[w], pure=False)
    assert done.result() == 3
    rid = f"{uuid.uuid4().hex[:8]}:0"
    assert client.run(_stop_reports, rid, [done.key, "never-sent"], workers=[w]) == {w: []}
    started, release = f"started-{rid}", f"release-{rid}"
    blocker = client.submit(_hold, started, release, workers=[w], pure=False)
    try:
        assert Event(started).wait(timeout=60)
        queued = client.submit(sum, [3, 4], workers=[w], pure=False)
        _poll(lambda: client.run(_worker_state, queued.key, workers=[w])[w] == "ready",
              "the second task never queued behind the first")
        reports = client.run(_stop_reports, rid, [done.key, queued.key], workers=[w])[w]
    finally:
        Event(release, client=client).set()
    assert blocker.result() is True and queued.result() == 7
    assert [(r["keys"], r["occupied"]) for r in reports] == [([queued.key], True)]


def _worker_state(key, dask_worker=None) -> str | None:
    ts = dask_worker.state.tasks.get(key)
    return None if ts is None else ts.state


def _stealable(keys, dask_scheduler=None) -> list[bool]:
    stealing = dask_scheduler.extensions["stealing"]
    return [dask_scheduler.tasks[k] in stealing.key_stealable for k in keys]


def test_copies_are_kept_out_of_work_stealing(client, workers):
    """A copy stolen onto the worker that holds its rows copies nothing (the engine drops it):
    the scheduler plugin keeps copy tasks out of stealing's candidates, and only them. Both
    tasks below wait, loosely bound to a busy worker, with a dependency held elsewhere: the
    other one is a candidate (the control), the copy is not."""
    assert client.sync(ensure_plugins, client) is SignalPath.SCHEDULER
    fit_id = uuid.uuid4().hex[:8]
    started, release = f"started-{fit_id}", f"release-{fit_id}"
    rows = client.scatter(np.ones(1000), workers=[workers[0]], hash=False)
    blocker = client.submit(_hold, started, release, workers=[workers[1]], pure=False)
    try:
        assert Event(started).wait(timeout=60)
        [copy] = copy_on(client, [rows], workers[1], f"{COPY_PREFIX}-{fit_id}")
        # a prefix of its own: stealing weighs a task by its prefix's measured duration, and
        # this file's other tasks teach the scheduler that theirs take milliseconds
        other = client.submit(_same_rows, rows, workers=[workers[1]], allow_other_workers=True,
                              key=f"stealable-control-{fit_id}", pure=False)
        _poll(lambda: client.run_on_scheduler(_processing, [copy.key, other.key]),
              "the tasks never queued")
        assert client.run_on_scheduler(_stealable, [copy.key, other.key]) == [False, True]
    finally:
        Event(release, client=client).set()
    assert blocker.result() is True
    np.testing.assert_array_equal(copy.result(), np.ones(1000))


def test_a_landed_copy_leaves_its_source_with_one_holder(client, workers):
    """The replica Dask fetched to make a copy is dropped as the copy lands: a fit placed
    right after a copying one reads each partition where it lives, not where a copy was."""
    assert client.sync(ensure_plugins, client) is SignalPath.SCHEDULER
    rows = client.scatter(np.ones(1000), workers=[workers[0]], hash=False)
    [copy] = copy_on(client, [rows], workers[1], f"{COPY_PREFIX}-{uuid.uuid4().hex[:8]}")
    np.testing.assert_array_equal(copy.result(), np.ones(1000))
    assert client.who_has([copy])[copy.key] == (workers[1],)
    assert client.who_has([rows])[rows.key] == (workers[0],)


def _read_while_held(rows, started: str, release: str) -> float:
    secede()  # long-running: the worker's thread is free for the copy meanwhile
    Event(started).set()
    assert Event(release).wait(timeout=60)
    return float(rows.sum())


def test_a_landed_copy_keeps_a_source_replica_a_running_task_reads(client, workers):
    """The fetched source replica is not dropped while a task running on the copy's worker
    still reads it: the worker refuses to drop it then, and that refusal took the worker
    down (and with it a test's task bound there, which then waited forever)."""
    assert client.sync(ensure_plugins, client) is SignalPath.SCHEDULER
    tag = uuid.uuid4().hex[:8]
    started, release = f"started-{tag}", f"release-{tag}"
    # a key of its own (unhashed): the same rows scattered by the test before, whose key
    # was still being forgotten, once left this reader waiting on a dependency never held
    rows = client.scatter(np.ones(1000), workers=[workers[0]], hash=False)
    reader = client.submit(_read_while_held, rows, started, release, workers=[workers[1]],
                           pure=False)
    try:
        assert Event(started).wait(timeout=60)
        [copy] = copy_on(client, [rows], workers[1], f"{COPY_PREFIX}-{tag}")
        np.testing.assert_array_equal(copy.result(), np.ones(1000))
        assert set(client.who_has([rows])[rows.key]) == {workers[0], workers[1]}
    finally:
        Event(release, client=client).set()
    assert reader.result() == 1000.0
    assert workers[1] in client.sync(client.scheduler.identity)["workers"]


def test_placed_and_copied_rows_are_aligned(client, workers):
    """Rows Dask deserializes sit at whatever offset their frame had, often no multiple of
    8 bytes, and numpy reads those a third slower (a helper on such a copy ran at half
    speed): scattered partitions and copies are realigned on arrival. Eight partitions of
    odd sizes: received as they are, most land unaligned."""
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((8 * 997, 3)), rng.standard_normal(8 * 997)
    parts = client.sync(place, client, X, y, None, (997,) * 8)
    futs = [*parts.X, *parts.y]
    assert client.gather(client.map(_is_aligned, futs, pure=False)) == [True] * 16
    copies = copy_on(client, parts.X, workers[0], f"{COPY_PREFIX}-{uuid.uuid4().hex[:8]}")
    assert client.gather(client.map(_is_aligned, copies, pure=False)) == [True] * 8
    np.testing.assert_array_equal(np.concatenate(client.gather(copies)), X)


def _is_aligned(a) -> bool:
    return bool(a.flags.aligned)


def _same_rows(a):
    return a


def _processing(keys, dask_scheduler=None) -> bool:
    tasks = dask_scheduler.tasks
    return all(k in tasks and tasks[k].state == "processing" for k in keys)
