"""Running a fit's coroutine for a synchronous caller: on the client's event loop, with the
fit's callbacks called back in the caller's thread, and Ctrl-C stopping the round in flight."""

from __future__ import annotations

import asyncio
import contextlib
import queue
from collections.abc import Iterator
from typing import Any

import distributed


@contextlib.contextmanager
def seceded() -> Iterator[None]:
    """Inside a Dask task (e.g. a fit run by joblib's dask backend in ``GridSearchCV``), leave
    the worker's thread pool while the fit waits on its partition tasks: they need the
    threads, which the outer tasks would otherwise all hold (a deadlock)."""
    try:
        distributed.get_worker()
    except ValueError:
        yield
        return
    distributed.secede()
    try:
        yield
    finally:
        distributed.rejoin()


class Call:
    """A callback call that the fit's coroutine hands to the thread that called ``fit``."""

    def __init__(self, func, args, future: asyncio.Future, loop) -> None:
        self.func, self.args, self.future, self.loop = func, args, future, loop

    def run(self) -> None:
        """Call it here; its result (or exception) goes back to the waiting coroutine.
        A ``KeyboardInterrupt`` propagates: the caller then cancels the fit."""
        try:
            value, error = self.func(*self.args), None
        except Exception as e:
            value, error = None, e
        self.loop.call_soon_threadsafe(_settle, self.future, value, error)


def _settle(future: asyncio.Future, value, error) -> None:
    if future.done():  # the fit was cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def run_sync(client: distributed.Client, run: Any) -> Any:
    """Run the fit on the client's event loop and wait for it here, calling its callbacks in
    this thread as it asks for them (``client.sync`` would run them in the event loop's
    thread: a slow callback would hold up the client's communications, and a notebook would
    show their output in the cell that started the client)."""
    loop = client.loop.asyncio_loop
    if loop.is_closed():
        raise RuntimeError("IOLoop is closed")
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        raise RuntimeError("daskabsp.fit called from the thread of the client's event loop; "
                           "use 'await daskabsp.fit(...)' with an asynchronous client")
    calls: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
    run.observers.call_through(calls)
    done = asyncio.run_coroutine_threadsafe(run.run(), loop)
    done.add_done_callback(lambda _: calls.put(None))
    try:
        while True:
            try:
                call = calls.get(timeout=10)  # a timeout keeps Ctrl-C responsive everywhere
            except queue.Empty:
                continue
            if call is None:
                break
            call.run()
        result = done.result()
    except KeyboardInterrupt as e:
        # Cancel the fit, and wait until the round it was running has been told to stop,
        # so that none of its tasks goes on computing.
        done.cancel()
        client.sync(run.halt)
        run.end_callbacks(error=e)
        raise
    except BaseException as e:
        run.end_callbacks(error=e)
        raise
    run.end_callbacks(error=None)  # here, in the caller's thread, like the other callbacks
    return result
