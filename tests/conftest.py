"""Shared fixtures: one real LocalCluster with worker processes for the whole session."""

from __future__ import annotations

import gc

import pytest
from distributed import Client, LocalCluster


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Report a failure with the garbage collector paused. Python 3.11 parses source (``ast``)
    to format a traceback; a collection in the middle of pytest's parse can run a finalizer
    that logs another traceback (an asyncio task's "exception was never retrieved"),
    re-entering the parser: ``SystemError: AST constructor recursion depth mismatch``, an
    INTERNALERROR that ends the run and hides which test failed."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return (yield)
    finally:
        if paused:
            gc.enable()


@pytest.fixture(autouse=True)
def fresh_link_rates(monkeypatch):
    """Each test prices its first copy for helpers afresh: the link rates earlier tests'
    copies measured on the shared cluster (slow ones on a loaded machine, or a copy cut
    short) would otherwise hold back another test's copies (a full-suite run had a test's
    first helped round at round 7 of 27)."""
    from daskabsp.engine import placement

    monkeypatch.setattr(placement, "_LINK_RATES", {})


@pytest.fixture(scope="session")
def cluster():
    """Four single-threaded worker processes (the behaviour under test depends on processes)."""
    with LocalCluster(
        n_workers=4, threads_per_worker=1, processes=True, dashboard_address=":0",
        memory_limit="3GiB",
    ) as cl:
        yield cl


@pytest.fixture(scope="session")
def client(cluster):
    """A synchronous client on the shared cluster, set as the default client."""
    with Client(cluster) as c:
        yield c


@pytest.fixture
def workers(client) -> list[str]:
    """The worker addresses of the shared cluster, sorted, asked of the scheduler itself:
    ``Client.scheduler_info()`` returns its cached totals, which list no workers, when its
    query fails (an empty list once in a full suite run)."""
    client.wait_for_workers(4)
    return sorted(client.sync(client.scheduler.identity)["workers"])


async def _stealing(on: bool, dask_scheduler=None) -> None:
    ext = dask_scheduler.extensions["stealing"]
    await (ext.start() if on else ext.stop())


@pytest.fixture
def no_stealing(client):
    """Work stealing paused on the shared cluster (for tests that pin a task behind another)."""
    client.run_on_scheduler(_stealing, False)
    try:
        yield
    finally:
        client.run_on_scheduler(_stealing, True)
