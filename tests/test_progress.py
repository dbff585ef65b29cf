"""Watching a fit: round callbacks and the progress bar, on the shared LocalCluster."""

from __future__ import annotations

import asyncio
import gc
import io
import re
import threading
import time

import numpy as np
import pytest
from distributed import Client
from sklearn.datasets import make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from test_interrupt import _CtrlCOnFirstResult, _executing

import daskabsp
from daskabsp import ABSP, LogisticGD, ProgressBar, RoundCallback, fit, slow_workers
from daskabsp.estimators import KMeans, LinearSVC, LogisticRegression, Ridge, _callbacks
from daskabsp.estimators._callbacks import callback_api
from daskabsp.estimators._validation import InvalidParameterError


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(n_samples=20_000, n_features=8, random_state=0)
    return X, y.astype(float)


def final_count(text: str) -> tuple[int, int]:
    """``(n, total)`` of the last state a text bar drew."""
    counts = re.findall(r"\| (\d+)/(\d+) \[", text)
    assert counts, text
    n, total = counts[-1]
    return int(n), int(total)


class Recorder(RoundCallback):
    """Records the hooks called, their thread, and what they were told."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.calls: list[tuple] = []
        self.threads: set[str] = set()
        self.stop_at = stop_at

    def _seen(self, *call) -> None:
        self.calls.append(call)
        self.threads.add(threading.current_thread().name)

    def on_fit_begin(self, info):
        self._seen("begin", info)

    def on_round_begin(self, round, coef):
        self._seen("round_begin", round, np.array(coef, copy=True))

    def on_round_end(self, info):
        self._seen("round_end", info)
        return self.stop_at is not None and info.round >= self.stop_at

    def on_fit_end(self, n_iter, converged, error):
        self._seen("end", n_iter, converged, error)


def test_silent_by_default(client, data, capsys):
    X, y = data
    fit(LogisticGD(), X, y, max_iter=3, tol=None)
    out, err = capsys.readouterr()
    assert out == "" and err == ""


def test_verbose_shows_a_bar_that_ends_at_the_rounds_run(client, data, capsys):
    X, y = data
    res = fit(LogisticGD(), X, y, max_iter=4, tol=None, verbose=1)
    out, err = capsys.readouterr()
    assert out == ""
    assert final_count(err) == (res.n_iter, res.n_iter) == (4, 4)
    assert "logreg absp" in err and "obj=" in err and "rows=" in err and "harvested=" in err


def test_bar_of_a_stopped_fit_ends_complete_at_the_rounds_run(client, data):
    X, y = data
    buf = io.StringIO()
    res = fit(LogisticGD(), X, y, max_iter=50, tol=None,
              callback=[ProgressBar(file=buf, desc="demo"), lambda r, w, obj: r >= 2])
    assert res.n_iter == 3
    text = buf.getvalue()
    assert final_count(text) == (3, 3)
    assert text.startswith("\rdemo:") and text.endswith("\n")


def test_bar_shows_the_harvest(client, workers, data):
    X, y = data
    buf = io.StringIO()
    with slow_workers(client, {workers[0]: 20.0}):
        res = fit(LogisticGD(), X, y, sync=ABSP(helpers=False), max_iter=3, tol=None,
                  n_partitions=4, callback=ProgressBar(file=buf))
    harvested = int(res.history.harvested.isel(round=-1).sum())
    share = int(res.history.rows_total[-1]) / int(res.history.quota.isel(round=-1).sum())
    text = buf.getvalue()
    assert f"harvested={harvested}/4" in text
    assert f"rows={share:.0%}" in text
    assert harvested >= 1 and share < 1


def test_callbacks_run_in_the_calling_thread_once_per_round(client, data):
    X, y = data
    rec = Recorder(stop_at=2)
    res = fit(LogisticGD(), X, y, max_iter=10, tol=None, callback=rec)
    assert rec.threads == {threading.current_thread().name}
    kinds = [c[0] for c in rec.calls]
    assert kinds == ["begin"] + ["round_begin", "round_end"] * 3 + ["end"]
    begin = rec.calls[0][1]
    assert (begin.max_iter, begin.n_partitions, begin.sync, begin.program) == (
        10, res.history.sizes["partition"], "absp", "logreg")
    assert begin.n_samples == X.shape[0] and begin.fit_id == res.history.attrs["fit_id"]
    ends = [c[1] for c in rec.calls if c[0] == "round_end"]
    h = res.history
    assert [i.round for i in ends] == [0, 1, 2]
    np.testing.assert_allclose([i.objective for i in ends], h.objective.values)
    np.testing.assert_allclose([i.elapsed for i in ends], h.wall_time.values)
    assert [i.rows for i in ends] == list(h.rows_total.values)
    assert [i.harvested for i in ends] == list(h.harvested.sum("partition").values)
    np.testing.assert_allclose(ends[-1].coef, res.coef)
    # A round starts from the parameters the previous one ended with.
    starts = [c[2] for c in rec.calls if c[0] == "round_begin"]
    np.testing.assert_allclose(starts[1], ends[0].coef)
    assert rec.calls[-1] == ("end", 3, False, None)


def test_a_failing_callback_fails_the_fit_and_ends_the_others(client, data):
    X, y = data
    rec = Recorder()

    def boom(r, w, obj):
        if r == 1:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fit(LogisticGD(), X, y, max_iter=10, tol=None, callback=[rec, boom])
    end = rec.calls[-1]
    assert end[:3] == ("end", 2, False) and isinstance(end[3], RuntimeError)


def test_callback_and_verbose_are_checked(client, data):
    X, y = data
    with pytest.raises(TypeError, match="callback must be"):
        fit(LogisticGD(), X, y, callback="progress")
    with pytest.raises(ValueError, match="'verbose' parameter of fit"):
        fit(LogisticGD(), X, y, verbose=-1)


def test_async_client_calls_callbacks_on_its_loop(cluster, data):
    X, y = data

    async def run():
        async with Client(cluster.scheduler_address, asynchronous=True,
                          set_as_default=False) as c:
            rec = Recorder()
            res = await fit(LogisticGD(), X, y, max_iter=2, tol=None, callback=rec,
                            client=c)
            return rec, res, threading.current_thread().name

    rec, res, loop_thread = asyncio.run(run())
    assert rec.threads == {loop_thread}
    assert [c[0] for c in rec.calls] == ["begin"] + ["round_begin", "round_end"] * 2 + ["end"]
    assert res.n_iter == 2


def test_exported():
    assert {"ProgressBar", "RoundCallback", "RoundInfo", "FitInfo"} <= set(daskabsp.__all__)


def test_ctrl_c_while_watched_stops_the_round_and_ends_the_callbacks(client, workers, data,
                                                                     caplog, capfd):
    """Callbacks run in the calling thread, which waits for the fit there: a Ctrl-C still
    stops the round's tasks quietly, and the callbacks are told the fit ended."""
    X, y = data
    rec = Recorder()
    buf = io.StringIO()
    client.register_plugin(_CtrlCOnFirstResult())
    try:
        with slow_workers(client, {workers[0]: 1000.0}):
            with pytest.raises(KeyboardInterrupt):
                fit(LogisticGD(), X, y, sync="bsp", max_iter=5, tol=None, n_partitions=4,
                    callback=[rec, ProgressBar(file=buf)])
            deadline = time.monotonic() + 20
            while any(client.run(_executing).values()):
                assert time.monotonic() < deadline, "a task of the round is still running"
                time.sleep(0.01)
    finally:
        client.unregister_scheduler_plugin(_CtrlCOnFirstResult.name)
    end = rec.calls[-1]
    assert end[:3] == ("end", 0, False) and isinstance(end[3], KeyboardInterrupt)
    assert final_count(buf.getvalue()) == (0, 5) and buf.getvalue().endswith("\n")
    client.run_on_scheduler(gc.collect)  # a round trip through the client's event loop
    gc.collect()
    noise = caplog.text + capfd.readouterr().err
    assert not [n for n in ("never retrieved", "AllExit", "Exception in callback",
                            "destroyed but it is pending") if n in noise], noise


# -- the estimators: verbose, and scikit-learn's callbacks (scikit-learn >= 1.9) ----------

ESTIMATORS = [LogisticRegression, LinearSVC, Ridge, KMeans]
requires_sklearn_callbacks = pytest.mark.skipif(
    callback_api() is None, reason="requires scikit-learn >= 1.9 (sklearn.callback)")


@pytest.fixture(scope="module")
def clf_data():
    X, y = make_classification(n_samples=6000, n_features=6, n_informative=4, random_state=0)
    return X, y


def _fit(est, X, y):
    return est.fit(X) if isinstance(est, KMeans) else est.fit(X, y)


def _rounds(est) -> int:
    return int(np.ravel(est.n_iter_)[0])


@pytest.mark.parametrize("Est", ESTIMATORS, ids=lambda c: c.__name__)
def test_estimators_are_silent_by_default_and_verbose_shows_their_rounds(client, clf_data,
                                                                         Est, capsys):
    X, y = clf_data
    assert Est().get_params()["verbose"] == 0
    _fit(Est(sync="bsp"), X, y)
    assert capsys.readouterr() == ("", "")
    est = _fit(Est(sync="bsp", verbose=1), X, y)
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"\r{Est.__name__} bsp:")
    assert final_count(err) == (_rounds(est), _rounds(est))


@pytest.mark.parametrize("Est", ESTIMATORS, ids=lambda c: c.__name__)
def test_verbose_is_validated(Est, clf_data):
    X, y = clf_data
    with pytest.raises(InvalidParameterError,
                       match=rf"The 'verbose' parameter of {Est.__name__} must be an int in "
                             r"the range \[0, inf\) or an instance of 'bool'. Got -1 instead."):
        _fit(Est(verbose=-1), X, y)


class FitRecorder:
    """A scikit-learn fit callback (the FitCallback protocol) that records what it sees."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.events: list[tuple] = []
        self.threads: set[str] = set()
        self.stop_after = stop_after

    def setup(self, estimator, context):
        self.events.append(("setup", context.task_name))

    def teardown(self, estimator, context):
        self.events.append(("teardown", context.task_name))

    def on_fit_task_begin(self, estimator, context, *, X=None, y=None, metadata=None,
                          fitted_estimator=None):
        self.events.append(("begin", context.task_name, context.max_subtasks))

    def on_fit_task_end(self, estimator, context, *, X=None, y=None, metadata=None,
                        fitted_estimator=None):
        self.threads.add(threading.current_thread().name)
        if context.task_name != "round":
            self.events.append(("end", context.task_name))
            return False
        # A round's fitted_estimator predicts with that round's parameters.
        score = fitted_estimator.score(X) if y is None else fitted_estimator.score(X, y)
        self.events.append(("end", "round", context.task_id, score))
        rounds = sum(e[:2] == ("end", "round") for e in self.events)
        return self.stop_after is not None and rounds >= self.stop_after


@requires_sklearn_callbacks
@pytest.mark.parametrize("Est", ESTIMATORS, ids=lambda c: c.__name__)
def test_sklearn_callbacks_see_one_task_per_round(client, clf_data, Est):
    X, y = clf_data
    rec = FitRecorder()
    seeded = {"random_state": 0} if Est is KMeans else {}  # a seed that converges in 50 rounds
    est = _fit(Est(sync="bsp", max_iter=50, **seeded).set_callbacks(rec), X, y)
    n = _rounds(est)
    assert rec.events[:2] == [("setup", "fit"), ("begin", "fit", 50)]
    rounds = rec.events[2:-2]
    assert rounds[0::2] == [("begin", "round", 0)] * n
    assert [e[:3] for e in rounds[1::2]] == [("end", "round", r) for r in range(n)]
    assert rec.events[-2:] == [("end", "fit"), ("teardown", "fit")]
    assert rec.threads == {threading.current_thread().name}
    last = rounds[-1][3]
    assert last == pytest.approx(est.score(X) if Est is KMeans else est.score(X, y))
    assert not hasattr(est, "_callback_fit_ctx") and not hasattr(est, "_callback_fit_args")


@requires_sklearn_callbacks
def test_a_sklearn_callback_returning_true_stops_the_fit(client, clf_data):
    X, y = clf_data
    rec = FitRecorder(stop_after=2)
    with pytest.warns(ConvergenceWarning, match="did not converge in 2 rounds") as w:
        est = LogisticRegression(sync="bsp").set_callbacks(rec).fit(X, y)
    assert w[0].filename == __file__  # the warning points at the caller, not the wrappers
    assert est.n_iter_[0] == 2 and est.history_.sizes["round"] == 2
    assert sum(e[:2] == ("end", "round") for e in rec.events) == 2
    assert rec.events[-1] == ("teardown", "fit")


class Propagated(FitRecorder):
    """Set on a meta-estimator, passed on to the estimators it fits (any depth)."""

    max_propagation_depth = None


@requires_sklearn_callbacks
def test_sklearn_callbacks_reach_the_rounds_inside_pipeline_and_grid_search(client, clf_data):
    X, y = clf_data
    rec = Propagated()
    search = GridSearchCV(make_pipeline(StandardScaler(), LogisticRegression()),
                          {"logisticregression__C": [0.1, 1.0],
                           "logisticregression__sync": ["bsp", "absp"]}, cv=2)
    search.set_callbacks(rec).fit(X, y)
    ends = [e for e in rec.events if e[0] == "end"]
    # 2 x 2 candidates x 2 folds, and the refit: each ends its rounds, then its fit.
    fits = [i for i, e in enumerate(ends) if e[1] == "fit"]
    assert len(fits) >= 9
    rounds = [e for e in ends if e[1] == "round"]
    assert len(rounds) >= 9 and all(0.5 < e[3] <= 1 for e in rounds)
    assert rec.events[0] == ("setup", "fit") and rec.events[-1] == ("teardown", "fit")


@requires_sklearn_callbacks
def test_sklearn_progress_bar_runs_on_the_estimators(client, clf_data):
    pytest.importorskip("rich")
    from sklearn.callback import ProgressBar as SkProgressBar

    X, y = clf_data
    est = LogisticRegression(sync="bsp").set_callbacks(SkProgressBar()).fit(X, y)
    assert est.n_iter_[0] >= 1


def test_without_sklearn_callbacks_fits_still_work(client, clf_data, monkeypatch, capsys):
    """scikit-learn < 1.9 has no sklearn.callback: fits do not need it, set_callbacks says
    what it needs."""
    X, y = clf_data
    monkeypatch.setattr(_callbacks, "callback_api", lambda: None)
    est = LogisticRegression(sync="bsp", verbose=1).fit(X, y)
    assert final_count(capsys.readouterr().err)[0] == est.n_iter_[0]
    with pytest.raises(RuntimeError, match=r"scikit-learn >= 1.9"):
        LogisticRegression().set_callbacks(FitRecorder())
