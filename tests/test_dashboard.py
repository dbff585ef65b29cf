"""The daskabsp dashboard page: where it is served, what a browser sees during a fit, and the
scheduler's bounded record behind it."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from distributed import Client

from daskabsp import LogisticGD, fit, slow_workers
from daskabsp.extension._fits import PAGE, FitBook

requires_bokeh = pytest.mark.skipif(importlib.util.find_spec("bokeh") is None,
                                    reason="the page needs bokeh (pip install '.[dashboard]')")


def _poll(get, what: str, timeout: float = 60.0, interval: float = 0.1):
    """``get()``'s first truthy value, polled until ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = get()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval)


def _http_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def _base(cluster) -> str:
    return cluster.dashboard_link.rsplit("/status", 1)[0]


def _xy(n: int = 400_000, d: int = 10, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    return X, (X[:, 0] + 0.5 * rng.standard_normal(n) > 0).astype(float)


def _book_fits(dask_scheduler) -> dict:
    book = dask_scheduler.plugins["daskabsp"].book
    return {f: (r.status, r.n_rounds) for f, r in book.fits.items()}


# -- where the page is served ---------------------------------------------------------------


@requires_bokeh
def test_local_cluster_started_after_import_serves_the_page(cluster):
    """The session's LocalCluster was started after ``import daskabsp``: the page is in the
    "More..." menu's list (what dask-labextension reads) and loads."""
    plots = _http_json(_base(cluster) + "/individual-plots.json")
    assert PAGE in plots.values()
    with urllib.request.urlopen(_base(cluster) + PAGE, timeout=10) as r:
        assert r.status == 200
        assert b"Dask: daskabsp" in r.read()


def _start_scheduler(tmp_path, args: list[str], env: dict) -> tuple[subprocess.Popen, dict]:
    sched_file = tmp_path / "scheduler.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--port", "0",
         "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(sched_file), *args],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    info = _poll(lambda: sched_file.exists() and json.loads(sched_file.read_text() or "{}"),
                 "the scheduler file")
    return proc, info


def _stop(*procs: subprocess.Popen) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(timeout=30)


@requires_bokeh
@pytest.mark.slow
@pytest.mark.parametrize("how", ["cli-preload", "config-preload", "no-preload"])
def test_command_line_scheduler_serves_the_page_with_the_preload(tmp_path, how):
    """``dask scheduler --preload daskabsp.dashboard``, or the same preload through the
    ``distributed.scheduler.preload`` config (dask-jobqueue, Kubernetes), serves the page; a
    plain ``dask scheduler`` does not. With the preload, a fit's rounds reach its record."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    args = []
    if how == "cli-preload":
        args = ["--preload", "daskabsp.dashboard"]
    elif how == "config-preload":
        env["DASK_DISTRIBUTED__SCHEDULER__PRELOAD"] = '["daskabsp.dashboard"]'
    sched, info = _start_scheduler(tmp_path, args, env)
    procs = [sched]
    try:
        base = f"http://127.0.0.1:{info['services']['dashboard']}"
        plots = _poll(lambda: _try_json(base + "/individual-plots.json"), "the dashboard")
        assert (PAGE in plots.values()) == (how != "no-preload")
        if how != "cli-preload":
            return
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", info["address"],
             "--nthreads", "1", "--no-dashboard"], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with Client(info["address"], timeout="60s", set_as_default=False) as c:
            c.wait_for_workers(1, timeout=60)
            res = fit(LogisticGD(), *_xy(4000, 3), max_iter=3, tol=None, client=c)
            def book_fits(dask_scheduler):  # local: pickled by value for this scheduler
                book = dask_scheduler.plugins["daskabsp"].book
                return {f: (r.status, r.n_rounds) for f, r in book.fits.items()}

            fits = c.run_on_scheduler(book_fits)
            assert fits[res.history.attrs["fit_id"]] == ("finished", 3)
    finally:
        _stop(*procs)


def _try_json(url: str):
    try:
        return _http_json(url)
    except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
        return None


def _run_python(code: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=240, env=env)


_TWO_FITS = """
    import logging, sys, urllib.request, json
    {prelude}
    import numpy as np
    from distributed import Client, LocalCluster
    from daskabsp import LogisticGD, fit

    if __name__ == "__main__":
        logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
        logging.getLogger("distributed").setLevel(logging.ERROR)
        rng = np.random.default_rng(0)
        X = rng.standard_normal((4000, 3)); y = (X[:, 0] > 0).astype(float)
        {cluster}
            for _ in range(2):
                res = fit(LogisticGD(), X, y, max_iter=2, tol=None, client=client)
                print("FIT", res.n_iter)
            try:
                plots = json.load(urllib.request.urlopen(
                    client.dashboard_link.rsplit("/status", 1)[0] + "/individual-plots.json"))
            except Exception as e:  # no dashboard
                plots = {{"error": repr(e)}}
            print("PAGES", sorted(plots.values()))
"""

_LOCAL = ("with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=':0') "
          "as cl, Client(cl) as client:")


def _info(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("daskabsp.monitor.reporting ")]


@requires_bokeh
@pytest.mark.slow
def test_fit_on_a_scheduler_without_the_page_works_and_says_where_to_get_it_once():
    """A LocalCluster whose preloads the user configured (without daskabsp's): no page; two
    fits run, and the process says once, at INFO, how to get the page."""
    proc = _run_python(_TWO_FITS.format(prelude="", cluster=_LOCAL),
                       {"DASK_DISTRIBUTED__SCHEDULER__PRELOAD": '["json"]'})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("FIT 2") == 2
    assert PAGE not in proc.stdout
    said = _info(proc)
    assert len(said) == 1, proc.stderr[-3000:]
    assert "--preload daskabsp.dashboard" in said[0]
    assert "distributed.scheduler.preload" in said[0]


@pytest.mark.slow
def test_without_bokeh_there_is_no_page_and_the_fit_says_so_once():
    proc = _run_python(_TWO_FITS.format(
        prelude='sys.modules["bokeh"] = None  # as if bokeh were not installed',
        cluster=_LOCAL))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("FIT 2") == 2
    said = _info(proc)
    assert len(said) == 1, proc.stderr[-3000:]
    assert "no bokeh" in said[0] and "install bokeh" in said[0] and "'.[dashboard]'" in said[0]


@requires_bokeh
@pytest.mark.slow
def test_embedded_cluster_serves_the_page_whatever_preloads_are_configured():
    proc = _run_python(_TWO_FITS.format(
        prelude="from daskabsp.cluster import embedded_client",
        cluster="if True:\n            client = embedded_client()"),
        {"DASK_DISTRIBUTED__SCHEDULER__PRELOAD": '["json"]'})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("FIT 2") == 2
    assert PAGE in proc.stdout
    said = _info(proc)
    assert len(said) == 1 and PAGE in said[0], proc.stderr[-3000:]  # the link, once


# -- the scheduler's record -------------------------------------------------------------------


@requires_bokeh
def test_fits_of_a_client_that_leaves_are_dropped(client, cluster):
    with Client(cluster, set_as_default=False) as c:
        res = fit(LogisticGD(), *_xy(4000, 3), max_iter=2, tol=None, client=c)
        fit_id = res.history.attrs["fit_id"]
        assert client.run_on_scheduler(_book_fits)[fit_id] == ("finished", 2)
    _poll(lambda: fit_id not in client.run_on_scheduler(_book_fits),
          "the scheduler to forget the fits of the client that left")


def _round(book: FitBook, fit_id: str, r: int, rows, quota, compute, worker, wall=None):
    book.report(fit_id, [dict(kind="round", round=r, wall=wall if wall is not None else r + 1.0,
                              objective=1.0 / (r + 1), rows=rows, quota=quota,
                              compute=compute, harvested=[k < q for k, q in
                                                          zip(rows, quota, strict=True)],
                              worker=worker)])


def test_book_is_bounded_per_fit_and_in_finished_fits():
    book = FitBook(max_rounds=5, max_finished=2)
    for i in range(4):
        book.report(f"f{i}", [dict(kind="start", client="c", program="logreg", sync="absp",
                                   n_partitions=2)])
        for r in range(8):
            _round(book, f"f{i}", r, [100, 50], [100, 100], [0.1, 0.1], ["a", "b"])
            book.note_latency(f"f{i}", r, 0.01)
        if i < 3:
            book.report(f"f{i}", [dict(kind="end", status="finished")])
    assert list(book.fits) == ["f1", "f2", "f3"]  # the last 2 finished, and the running one
    rec = book.fits["f3"]
    assert rec.n_rounds == 8 and [rr.round for rr in rec.rounds] == [3, 4, 5, 6, 7]
    assert len(rec.latency) == 5
    assert rec.rounds[-1].rows.dtype == np.int64  # compact: numpy arrays per round
    book.start("f4", client="c", program="p", sync="absp", n_partitions=2)
    book.end("f4", status="failed")
    assert list(book.fits) == ["f2", "f3", "f4"]
    # Very many partitions: fewer rounds kept, so the heat map stays drawable.
    wide = FitBook(max_rounds=200).start("w", client="c", program="p", sync="absp",
                                         n_partitions=50_000)
    assert wide.rounds.maxlen == 10
    v = book.version
    book.forget_client("someone-else")
    assert book.version == v and len(book.fits) == 3
    book.forget_client("c")
    assert book.fits == {} and book.version > v


def test_bsp_wait_scales_the_slowest_partition_to_its_quota_and_speeds_are_smoothed():
    book = FitBook(max_rounds=10, max_finished=1)
    book.report("f", [dict(kind="start", client="c", program="p", sync="absp",
                           n_partitions=3)])
    # a: 1000 rows in 0.1 s (10 000 rows/s); b: 250 of 1000 rows in 0.1 s, harvested;
    # c: on worker b, stopped before it started.
    _round(book, "f", 0, [1000, 250, 0], [1000, 1000, 500], [0.1, 0.1, 0.0], ["a", "b", "b"],
           wall=0.5)
    rec = book.fits["f"]
    rr = rec.rounds[-1]
    assert rr.duration == 0.5
    assert rr.bsp_wait == pytest.approx(0.4)  # b at its full quota
    assert rec.speed == pytest.approx({"a": 10_000.0, "b": 2_500.0})
    # c computed nothing in round 1: projected at its worker's speed, 1000 / 2500 s.
    _round(book, "f", 1, [1000, 1000, 0], [1000, 1000, 1000], [0.1, 0.1, 0.0],
           ["a", "b", "b"], wall=0.8)
    assert rec.rounds[-1].duration == pytest.approx(0.3)
    # b's speed moves a third of the way from 2 500 towards 10 000.
    assert rec.speed["b"] == pytest.approx(2_500 + (10_000 - 2_500) / 3)
    assert rec.rounds[-1].bsp_wait == pytest.approx(1000 / rec.speed["b"])


def test_speeds_count_only_the_rows_a_partitions_own_task_scanned():
    """Helpers scanned 750 of b's 1000 rows: b's speed is its own 250 rows in its 0.1 s, and
    BSP would have waited for b to scan all 1000 at that speed."""
    book = FitBook(max_rounds=10, max_finished=1)
    book.report("f", [dict(kind="start", client="c", program="p", sync="absp",
                           n_partitions=2)])
    book.report("f", [dict(kind="round", round=0, wall=0.2, objective=1.0, rows=[1000, 1000],
                           quota=[1000, 1000], compute=[0.1, 0.1], harvested=[False, True],
                           worker=["a", "b"], scanned=[1000, 250])])
    rec = book.fits["f"]
    assert rec.speed == pytest.approx({"a": 10_000.0, "b": 2_500.0})
    assert rec.rounds[-1].bsp_wait == pytest.approx(0.4)
    assert rec.rounds[-1].rows.tolist() == [1000, 1000]  # the heat map shows every row


# -- in a browser -----------------------------------------------------------------------------


def _browser_paths() -> tuple[str | None, str | None]:
    binary = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                   if shutil.which(n)), None)
    return binary, shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium driven by selenium (Debian's chromium and chromium-driver)."""
    webdriver = pytest.importorskip("selenium.webdriver",
                                    reason="selenium is in the test extras")
    binary, driver = _browser_paths()
    if binary is None or driver is None:
        pytest.skip("needs Chromium and its driver (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = binary
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1300"):
        opts.add_argument(a)
    drv = webdriver.Chrome(service=Service(driver), options=opts)
    try:
        yield drv
    finally:
        drv.quit()


#: Reads the page's data sources from Bokeh's document in the browser.
_READ_PAGE = """
const doc = window.Bokeh && Bokeh.documents && Bokeh.documents[0];
if (!doc) return null;
const out = {};
for (const name of arguments[0]) {
    const ds = doc.get_model_by_name('daskabsp-' + name);
    if (!ds) return null;
    const entries = ds.data instanceof Map ? Array.from(ds.data.entries())
                                           : Object.entries(ds.data);
    out[name] = {};
    for (const [k, v] of entries) out[name][k] = Array.from(v);
}
out.select = doc.get_model_by_name('daskabsp-select').value;
return out;
"""

_SOURCES = ["fits", "heatmap", "harvested", "speed", "durations", "objective", "latency"]


def _page(browser) -> dict | None:
    return browser.execute_script(_READ_PAGE, _SOURCES)


def _fit_row(state: dict, fit_id: str) -> dict | None:
    fits = state["fits"]
    if fit_id not in fits["fit"]:
        return None
    i = fits["fit"].index(fit_id)
    return {k: v[i] for k, v in fits.items()}


@requires_bokeh
def test_page_shows_the_rounds_of_a_fit_while_it_runs(client, cluster, workers, browser):
    """The page, open in headless Chromium before a fit starts, receives the fit's rounds while
    it runs (the fit goes on until the browser has seen them), and at the end holds exactly
    the fit's history: share of quota and harvested flags per round and partition, objective,
    round durations, harvest latency, the workers' speeds."""
    browser.get(_base(cluster) + PAGE)
    before = _poll(lambda: _page(browser), "the page's Bokeh document")
    old = set(before["fits"]["fit"])
    seen = threading.Event()
    out: dict = {}

    def run() -> None:
        try:
            out["res"] = fit(LogisticGD(), *_xy(), sync="absp", max_iter=3000, tol=None,
                             n_partitions=4, client=client,
                             callback=lambda r, coef, obj: seen.is_set())
        except BaseException as e:  # reported by the main thread
            out["error"] = e

    def running_fit():
        state = _page(browser)
        new = [f for f in (state or {}).get("fits", {}).get("fit", []) if f not in old]
        if not new:
            return None
        row = _fit_row(state, new[0])
        if (row["status"] == "running" and state["select"] == new[0]
                and len(set(state["heatmap"]["round"])) >= 3):
            return new[0]
        return None

    with slow_workers(client, {workers[0]: 4.0}):
        t = threading.Thread(target=run)
        t.start()
        try:
            fit_id = _poll(running_fit, "the page to show three rounds of the running fit")
        finally:
            seen.set()  # the fit stops at its next round
            t.join(timeout=120)
    assert "error" not in out, out.get("error")
    res = out["res"]
    h = res.history
    assert h.attrs["fit_id"] == fit_id

    shown = list(range(max(0, res.n_iter - 200), res.n_iter))
    # The scheduler measures a round's harvest latency when the round's keys are forgotten,
    # which may reach it after the fit's end report.
    latency = {r: h.harvest_latency.values[r] * 1e3 for r in shown
               if not math.isnan(h.harvest_latency.values[r])}

    def finished():
        state = _page(browser)
        row = state and _fit_row(state, fit_id)
        done = (row and row["status"] == "finished" and row["rounds"] == res.n_iter
                and set(state["latency"]["round"]) >= latency.keys())
        return state if done else None

    state = _poll(finished, "the page to show the finished fit")
    assert state["select"] == fit_id
    heat = state["heatmap"]
    assert sorted(set(heat["round"])) == shown
    rows, quota = h.rows.values, h.quota.values
    for r, p, share, k in zip(heat["round"], heat["partition"], heat["share"], heat["rows"],
                              strict=True):
        assert k == rows[r, p]
        assert share == pytest.approx(rows[r, p] / quota[r, p])
    marks = set(zip(state["harvested"]["round"], state["harvested"]["partition"], strict=True))
    assert marks == {(r, p) for r in shown for p in range(4) if h.harvested.values[r, p]}
    assert marks  # the slowed worker's partition was harvested
    np.testing.assert_allclose(state["objective"]["objective"], h.objective.values[shown])
    np.testing.assert_allclose(state["objective"]["wall"], h.wall_time.values[shown])
    np.testing.assert_allclose(state["durations"]["duration"],
                               np.diff(h.wall_time.values, prepend=0.0)[shown])
    assert all(b >= 0 for b in state["durations"]["bsp_wait"])
    lat = dict(zip(state["latency"]["round"], state["latency"]["latency_ms"], strict=True))
    assert lat.keys() == latency.keys() and latency
    np.testing.assert_allclose([lat[r] for r in latency], list(latency.values()))
    ran = {w.split("://", 1)[-1] for w in np.unique(h.worker.values[shown[-1]])}
    assert set(state["speed"]["worker"]) <= {w.split("://", 1)[-1] for w in workers}
    assert ran <= set(state["speed"]["worker"])
    slow, fast = workers[0].split("://", 1)[-1], workers[1].split("://", 1)[-1]
    speed = dict(zip(state["speed"]["worker"], state["speed"]["speed"], strict=True))
    assert speed[slow] < speed[fast]  # the emulated straggler measures slower
