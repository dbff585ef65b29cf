"""Plots of fit histories: the ``absp`` Dataset accessor and ``plot_objectives``."""

from __future__ import annotations

import io
import subprocess
import sys

import dask
import numpy as np
import pytest
import xarray as xr
from sklearn.datasets import make_classification

import daskabsp
from daskabsp import ABSP, LogisticGD, fit, plot_objectives, slow_workers
from daskabsp.cluster import worker_addresses
from daskabsp.monitor.history import HistoryRecorder

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
plt = pytest.importorskip("matplotlib.pyplot")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def fits(client):
    """A BSP and an A-BSP fit with one worker 20x slower, so A-BSP harvests (and its
    helpers cover every leftover, however small: these partitions scan in milliseconds, and
    a leftover under ``daskabsp.help-above`` would otherwise wait for the next round)."""
    X, y = make_classification(n_samples=20_000, n_features=8, random_state=0)
    workers = worker_addresses(client)
    out = {}
    with slow_workers(client, {workers[0]: 20.0}), dask.config.set({"daskabsp.help-above": 0}):
        for sync in ["bsp", "absp"]:
            out[sync] = fit(LogisticGD(helpers=True), X, y.astype(float), sync=sync,
                            max_iter=6, tol=None, n_partitions=4).history
    assert out["absp"].harvested.any() and not out["bsp"].harvested.any()
    return out


def test_plot_objective_draws_the_objective_against_wall_time(fits):
    h = fits["absp"]
    ax = h.absp.plot_objective()
    (line,) = ax.get_lines()
    np.testing.assert_array_equal(line.get_xdata(), h.wall_time.values)
    np.testing.assert_array_equal(line.get_ydata(), h.objective.values)
    assert line.get_label() == "A-BSP"
    assert ax.get_xlabel() == "time since the fit started (s)"
    assert ax.get_ylabel() == "objective"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["A-BSP"]


def test_plot_objective_options(fits):
    h = fits["bsp"]
    _, ax = plt.subplots()
    assert h.absp.plot_objective(ax=ax, label="mine", x="round", color="red") is ax
    line = ax.get_lines()[0]
    np.testing.assert_array_equal(line.get_xdata(), np.arange(h.sizes["round"]))
    assert line.get_label() == "mine" and line.get_color() == "red"
    optimum = float(h.objective.values[-1])  # the last round is at the "optimum": left out
    ax = h.absp.plot_objective(optimum=optimum)
    y = ax.get_lines()[0].get_ydata()
    np.testing.assert_allclose(y[:-1], h.objective.values[:-1] - optimum)
    assert np.isnan(y[-1]) and ax.get_yscale() == "log"
    with pytest.raises(ValueError, match="x must be"):
        h.absp.plot_objective(x="time")


def test_plot_objectives_puts_several_fits_on_one_axis(fits):
    ax = plot_objectives({"BSP": fits["bsp"], "A-BSP": fits["absp"]})
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["BSP", "A-BSP"]
    for line, h in zip(lines, [fits["bsp"], fits["absp"]], strict=True):
        np.testing.assert_array_equal(line.get_xdata(), h.wall_time.values)
        np.testing.assert_array_equal(line.get_ydata(), h.objective.values)
    ax = plot_objectives([fits["bsp"], fits["absp"]])  # labels from the sync model
    assert [line.get_label() for line in ax.get_lines()] == ["BSP", "A-BSP"]
    with pytest.raises(ValueError, match="at least one"):
        plot_objectives([])


def test_plot_rows_shows_the_share_of_quota_and_marks_the_harvests(fits):
    h = fits["absp"]
    ax = h.absp.plot_rows()
    (image,) = ax.get_images()
    share = image.get_array()
    assert share.shape == (h.sizes["partition"], h.sizes["round"])
    # the share the partition's own task scanned; helpers scanned the rest
    np.testing.assert_allclose(share, ((h.rows - h.helped_rows) / h.quota).T.values)
    assert share.min() < 1 and share.max() == 1
    assert (h.rows <= h.quota).all() and h.helped_rows.any()
    (marks,) = ax.collections
    p, r = np.nonzero(h.harvested.T.values)
    np.testing.assert_array_equal(marks.get_offsets(), np.column_stack([r, p]))
    assert marks.get_label() == "harvested"
    assert len(ax.figure.axes) == 2  # and a colour bar
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("round", "partition")


def test_plot_rows_of_bsp_is_full_and_unmarked(fits):
    ax = fits["bsp"].absp.plot_rows(colorbar=False)
    np.testing.assert_array_equal(ax.get_images()[0].get_array(), 1.0)
    assert not ax.collections and len(ax.figure.axes) == 1


def test_plot_rows_marks_dropped_work_apart():
    """Under ABSP(on_quorum="drop") a stopped partition's rows are not counted."""
    rec = HistoryRecorder(2)
    for r in range(3):
        rec.add(wall=0.1 * (r + 1), objective=1.0 / (r + 1), params=None, rows=[100, 40],
                quota=[100, 100], cursor=[0, 0], compute_seconds=[0.1, 0.1],
                task_start=[0.0, 0.0], task_stop=[0.1, 0.1], harvested=[False, True],
                counted=[True, r == 0], worker=["a", "b"])
    h = rec.dataset(attrs={"sync": ABSP(on_quorum="drop").name}, sizes=[100, 100])
    ax = h.absp.plot_rows()
    np.testing.assert_allclose(ax.get_images()[0].get_array(), [[1, 1, 1], [0.4, 0.4, 0.4]])
    harvested, dropped = ax.collections
    np.testing.assert_array_equal(harvested.get_offsets(), [[0, 1]])
    np.testing.assert_array_equal(dropped.get_offsets(), [[1, 1], [2, 1]])
    assert dropped.get_label() == "dropped"


def test_the_figures_render(fits):
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3))
    plot_objectives({"BSP": fits["bsp"], "A-BSP": fits["absp"]}, ax=a)
    fits["absp"].absp.plot_rows(ax=b)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    buf.seek(0)
    pixels = matplotlib.image.imread(buf)
    assert pixels.ndim == 3 and len(np.unique(pixels.reshape(-1, pixels.shape[-1]),
                                              axis=0)) > 50


def test_a_dataset_that_is_no_history_is_refused():
    with pytest.raises(ValueError, match="not a daskabsp fit history: it has no 'objective'"):
        xr.Dataset({"loss": ("round", [1.0, 0.5])}).absp.plot_objective()


def test_importing_daskabsp_does_not_import_matplotlib():
    code = "import sys, daskabsp; assert 'matplotlib' not in sys.modules; print('ok')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.strip() == "ok", proc.stderr
    assert "plot_objectives" in daskabsp.__all__
