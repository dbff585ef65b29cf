"""The worker side of the harvest signal: each round's stop flag, set when the scheduler's
stop arrives.

:class:`AbspWorkerPlugin` keeps a ``threading.Event`` per round (the partition tasks of
:mod:`._core` check it between chunks) and sets it from the batched-stream op
``daskabsp-stop`` the scheduler plugin sends (or the RPC ``daskabsp_stop``); it answers a stop
with the round's tasks still queued on the worker (``daskabsp-idle``), which will compute
nothing. Runs on the workers; the scheduler plugin installs it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from .. import config
from ._core import EXTENSION
from ._protocol import FORGET_OP, IDLE_OP, PLUGIN_NAME, STOP_HANDLER, STOP_OP

#: Worker task states of a task that has not started: queued for a thread, or for its inputs.
QUEUED = frozenset({"waiting", "ready", "constrained"})


class AbspWorkerPlugin(WorkerPlugin):
    """Keeps the per-round stop flags of one worker and sets them when told to stop.

    Registered as ``worker.extensions["daskabsp"]``; its handlers are the batched-stream op
    ``daskabsp-stop`` (used by the scheduler plugin) and the RPC ``daskabsp_stop``.
    """

    name = PLUGIN_NAME
    idempotent = True

    def setup(self, worker) -> None:
        self._worker = worker
        self._held: dict[Any, tuple[dict, set]] = {}  # executing key -> idle report it holds
        #: Keys a stop named that had not reached this worker yet -> their round: reported
        #: idle when they arrive (they would otherwise wait, unreported, for a busy thread).
        self._expected: OrderedDict[Any, str] = OrderedDict()
        self._lock = threading.Lock()
        self._flags: OrderedDict[str, threading.Event] = OrderedDict()
        self._max = int(config.get("max-rounds-per-worker"))
        worker.stream_handlers[STOP_OP] = self.stop
        worker.stream_handlers[FORGET_OP] = self.forget
        worker.handlers[STOP_HANDLER] = self._stop_rpc
        worker.extensions[EXTENSION] = self

    def flag(self, round_id: str) -> threading.Event:
        """The stop flag of ``round_id`` (created unset on first use)."""
        with self._lock:
            ev = self._flags.get(round_id)
            if ev is None:
                ev = self._flags[round_id] = threading.Event()
                if len(self._flags) > self._max:
                    self._flags.popitem(last=False)
            return ev

    def stop(self, rounds=(), keys=(), **kwargs: Any) -> None:
        """Set the stop flags of ``rounds``; report which of ``keys`` are queued here.

        Runs on the worker's event loop, where tasks also become ``executing``: a task that is
        queued now starts after its flag is set, so it will return without a row. Keys that
        have finished (their results are ahead of any report on this worker's stream) or
        that are executing are not reported; a worker with nothing queued sends nothing.
        """
        for rid in rounds:
            self.flag(rid).set()
        state = getattr(self._worker, "state", None)
        if not (keys and rounds) or state is None:
            return
        tasks = state.tasks
        for k in keys:
            if k not in tasks:
                self._expected[k] = rounds[0]
        while len(self._expected) > self._max:
            self._expected.popitem(last=False)
        idle = [k for k in keys if k in tasks and tasks[k].state in QUEUED]
        if not idle:
            return
        running = {ts.key for ts in state.executing} | {ts.key for ts in state.long_running}
        busy = {k for k in keys if k in running}
        report = {"op": IDLE_OP, "round": rounds[0], "keys": idle,
                  # every thread held by other work: the round's tasks here wait for it
                  "occupied": not busy and len(running) >= state.nthreads}
        if busy:
            # The round cannot settle before these return: send the report with their
            # results (one write) rather than just before them, which would hold the
            # results back by the batched stream's interval.
            held = (report, busy)
            for k in busy:
                self._held[k] = held
        else:
            self._worker.batched_stream.send(report)

    def forget(self, fit: str = "", **kwargs: Any) -> None:
        """Drop the stop flags of the rounds of ``fit`` (it has ended)."""
        prefix = f"{fit}:"
        with self._lock:
            for rid in [r for r in self._flags if r.startswith(prefix)]:
                del self._flags[rid]

    def transition(self, key, start, finish, **kwargs: Any) -> None:
        if self._expected and finish in QUEUED and key in self._expected:
            # a task of a round stopped before it arrived: it will compute nothing
            state = self._worker.state
            running = len(state.executing) + len(state.long_running)
            self._worker.batched_stream.send({
                "op": IDLE_OP, "round": self._expected.pop(key), "keys": [key],
                "occupied": running >= state.nthreads})
        if self._held and start == "executing":
            held = self._held.pop(key, None)
            if held is not None:
                report, busy = held
                busy.discard(key)
                if not busy:
                    self._worker.batched_stream.send(report)

    async def _stop_rpc(self, rounds=(), **kwargs: Any) -> None:
        self.stop(rounds)


def stop_on_worker(rounds: list[str], dask_worker=None) -> None:
    """Set the stop flags of ``rounds`` on this worker (for ``Client.run``)."""
    ext = dask_worker.extensions.get(EXTENSION) if dask_worker is not None else None
    if ext is not None:
        ext.stop(rounds)
