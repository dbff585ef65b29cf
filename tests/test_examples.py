"""The notebooks in examples/ run from top to bottom, and show what they say they show.

Each notebook is executed once, followed by a probe cell of this module (the notebooks are
saved with their outputs and without test code); its outputs are then read back: no error,
figures that are not blank, progress bars (their widgets' final state, which nbclient stores in
the notebook's metadata) that ended complete, and the plotted data that the probe prints as
JSON.
"""

from __future__ import annotations

import base64
import html.parser
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT_EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NOTEBOOKS = sorted(ROOT_EXAMPLES.glob("*.ipynb"))
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


#: Per notebook, the probe run after its last cell: it prints, as JSON, what the notebook's
#: figures and fits hold.
PROBES = {
    "straggler.ipynb": """
import json
import numpy as np
hists = {name: clf.history_ for name, clf in fits.items()}
maps = {"A-BSP": ax_rows, "A-BSP as published": ax_paper}
paper = hists["A-BSP as published"]
default = hists["A-BSP"]
nxt = (paper.cursor + paper.rows) % paper.partition_size
print(json.dumps({
    "lines": {line.get_label(): len(line.get_xdata()) for line in ax_obj.get_lines()},
    "rounds": {name: int(clf.n_iter_[0]) for name, clf in fits.items()},
    "history_rounds": {name: h.sizes["round"] for name, h in hists.items()},
    "heat_maps": {name: list(ax.get_images()[0].get_array().shape) for name, ax in maps.items()},
    "partitions": default.sizes["partition"],
    "own_share_plotted": all(bool(np.allclose(
        np.asarray(ax.get_images()[0].get_array()),
        ((hists[name].rows - hists[name].helped_rows) / hists[name].quota)
        .transpose("partition", "round").values)) for name, ax in maps.items()),
    "harvest_marks": {name: len(ax.collections[0].get_offsets()) if ax.collections else 0
                      for name, ax in maps.items()},
    "harvested": {name: int(h.harvested.sum()) for name, h in hists.items()},
    "cursor_rule": bool((paper.cursor.isel(round=slice(1, None)).values
                         == nxt.isel(round=slice(0, -1)).values).all()),
    "paper_helped": int(paper.helped_rows.sum()),
    "helped_rounds_full": bool((default.rows.where(default.helped_rows > 0)
                                == default.quota.where(default.helped_rows > 0))
                               .where(default.helped_rows > 0, True).all()),
    "coef_gap": max(float(np.abs(c.coef_ - fits["BSP"].coef_).max()) for c in fits.values()),
}))
""",
    "pipeline_grid_search.ipynb": """
import json
print(json.dumps({
    "fits": len(results) * search.n_splits_ + 1,
    "lines": [len(line.get_xdata()) for line in ax.get_lines()],
    "best_rounds": int(best.n_iter_[0]),
    "rounds_scored": None if scores is None else len(scores),
    "rounds_monitored": None if scores is None else int(clf.n_iter_[0]),
}))
""",
    "glm_lasso_straggler.ipynb": """
import json
print(json.dumps({
    "lines": {line.get_label(): len(line.get_xdata()) for line in ax_obj.get_lines()},
    "rounds": {"BSP": int(fits["bsp"].n_iter_), "A-BSP": int(fits["absp"].n_iter_)},
    "gaps": [float((objective(e) - objective(sk)) / objective(sk)) for e in fits.values()],
    "harvested": int(fits["absp"].history_.harvested.sum()),
    "bsp_harvested": int(fits["bsp"].history_.harvested.sum()),
    "same_support": bool(np.array_equal(lasso.coef_ != 0, ref.coef_ != 0)),
    "lasso_rounds": int(lasso.n_iter_),
}))
""",
    "estimators.ipynb": """
import json
print(json.dumps({
    "lines": {line.get_label(): len(line.get_xdata()) for line in ax_obj.get_lines()},
    "rounds": {"BSP": int(straggled["bsp"].n_iter_[0]),
               "A-BSP": int(straggled["absp"].n_iter_[0])},
    "coef_gap": max(float(np.abs(fits[s].coef_ - sk.coef_).max()) for s in fits),
    "inertia_ratio": float(km.inertia_ / sk_km.inertia_),
    "harvested": int(straggled["absp"].history_.harvested.sum()),
    "ignored_change": float(np.abs(same.coef_ - fits["bsp"].coef_).max()),
}))
""",
}


@pytest.fixture(scope="module", params=NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def executed(request, tmp_path_factory):
    nb = nbformat.read(request.param, as_version=4)
    assert not any("figure-data" in c.get("metadata", {}).get("tags", []) for c in nb.cells), \
        "test code belongs in PROBES, not in the notebook"
    probe = nbformat.v4.new_code_cell(PROBES[request.param.name],
                                      metadata={"tags": ["figure-data"]})
    nb.cells.append(probe)
    path = tmp_path_factory.mktemp(request.param.stem)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path)}}).execute()
    return request.param.name, nb


def outputs(nb, output_type: str | None = None):
    for cell in nb.cells:
        if cell.cell_type == "code":
            for o in cell.get("outputs", []):
                if output_type is None or o.get("output_type") == output_type:
                    yield cell, o


def figure_data(nb) -> dict:
    """The JSON that the cell tagged ``figure-data`` printed."""
    cells = [c for c in nb.cells if "figure-data" in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, "one cell tagged figure-data"
    text = "".join(o.get("text", "") for o in cells[0].get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")
    return json.loads(text)


def progress_bars(nb) -> list[dict]:
    """Final state of the notebook's progress bar widgets (tqdm.notebook draws them)."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    return [m["state"] for m in state.values() if m.get("model_name") == "FloatProgressModel"]


#: A line that shows an exception: ``print(f"{type(error).__name__}: {error}")`` in a cell.
PRINTED_ERROR = re.compile(r"^(\w+(?:Error|Exception|Warning)): (.*)$", re.MULTILINE)


class _TableHeaders(html.parser.HTMLParser):
    """The header rows (``<thead>``) of each HTML table: pandas draws a DataFrame so."""

    def __init__(self):
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._in_head = self._in_cell = False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "thead":
            self._in_head = True
        elif tag == "tr" and self._in_head:
            self.tables[-1].append([])
        elif tag == "th" and self._in_head:
            self._in_cell = True
            self.tables[-1][-1].append("")

    def handle_endtag(self, tag):
        if tag == "thead":
            self._in_head = False
        elif tag == "th":
            self._in_cell = False

    def handle_data(self, data):
        if self._in_cell:
            self.tables[-1][-1][-1] += data.strip()


def what_must_not_change(nb) -> list[dict]:
    """Per code cell, the outputs that a re-run must reproduce: the errors it raised or
    printed (exception type and message) and the column headers of the tables it shows.
    Timings, scores and row counts vary from run to run and are left out."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        errors, tables = [], []
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                errors.append((o["ename"], o["evalue"]))
            elif o.get("output_type") == "stream" and o.get("name") == "stdout":
                errors += [m.groups() for m in PRINTED_ERROR.finditer(o["text"])]
            elif "text/html" in o.get("data", {}):
                parser = _TableHeaders()
                parser.feed(o["data"]["text/html"])
                tables += parser.tables
        cells.append({"source": cell.source.splitlines()[:1], "errors": errors,
                      "tables": tables})
    return cells


def test_saved_outputs_that_matter_are_read():
    """The comparison below is not empty: the saved notebooks show a rejected parameter and
    tables, and a saved error message that the code no longer gives is seen (the estimators
    notebook once showed l1_ratio's rejection, saved before L1 was supported)."""
    saved = {p.name: what_must_not_change(nbformat.read(p, as_version=4)) for p in NOTEBOOKS}
    errors = [e for cells in saved.values() for c in cells for e in c["errors"]]
    assert [name for name, _ in errors] == ["InvalidParameterError"]
    assert "dual=True" in errors[0][1]  # LogisticRegression(dual=True) with lbfgs
    tables = [t for cells in saved.values() for c in cells for t in c["tables"]]
    assert len(tables) >= 4 and all(t and t[0] for t in tables)
    assert ["", "fit", "seconds", "rounds", "max |coef - scikit-learn's|"] in \
        [t[0] for t in saved["estimators.ipynb"][1]["tables"]]

    nb = nbformat.read(ROOT_EXAMPLES / "estimators.ipynb", as_version=4)
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream" and "InvalidParameterError" in o["text"]:
                o["text"] = ("InvalidParameterError: The 'l1_ratio' parameter of "
                             "LogisticRegression must be 0 or None. Got 1.0 instead.\n")
    assert what_must_not_change(nb) != saved["estimators.ipynb"]


@pytest.mark.slow
def test_notebook_outputs_that_matter_are_the_saved_ones(executed):
    """Re-run, each cell raises or prints the same errors and shows tables with the same
    columns as the notebook saved in examples/: a saved output that the code no longer
    gives (an error message changed, a parameter no longer rejected, a column renamed) fails
    until the notebook is re-executed and saved."""
    name, nb = executed
    saved = what_must_not_change(nbformat.read(ROOT_EXAMPLES / name, as_version=4))
    fresh = what_must_not_change(nb)[:len(saved)]  # the probe cell comes last
    assert fresh == saved


@pytest.mark.slow
def test_notebook_runs(executed):
    _, nb = executed
    errors = [o for _, o in outputs(nb, "error")]
    assert not errors, errors


@pytest.mark.slow
def test_notebook_figures_are_drawn(executed):
    plt_image = pytest.importorskip("matplotlib.image")
    _, nb = executed
    pngs = [o["data"]["image/png"] for _, o in outputs(nb) if "image/png" in o.get("data", {})]
    assert pngs, "the notebook shows a figure"
    for png in pngs:
        pixels = plt_image.imread(io.BytesIO(base64.b64decode(png)))
        colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
        assert pixels.shape[0] > 100 and len(colours) > 50, "a blank figure"


@pytest.mark.slow
def test_notebook_shows_what_it_says(executed):
    name, nb = executed
    data = figure_data(nb)
    bars = progress_bars(nb)
    assert bars and all(b["bar_style"] == "success" and b["value"] == b["max"] >= 1
                        for b in bars), bars
    if name == "straggler.ipynb":
        # One line per fit, one point per round; a heat map per A-BSP fit with a cell per
        # partition and round, showing the history's own share (rows - helped_rows) / quota,
        # and a mark per harvested partition (there are some; none under BSP). The published
        # rule's cursors follow the resume rule and it has no helpers; a helped partition's
        # rows all count. The three fits reach the same model.
        assert data["lines"] == data["rounds"] == data["history_rounds"]
        for fit, shape in data["heat_maps"].items():
            assert shape == [data["partitions"], data["rounds"][fit]]
            assert data["harvest_marks"][fit] == data["harvested"][fit] > 0
        assert data["own_share_plotted"]
        assert data["harvested"]["BSP"] == 0
        assert data["cursor_rule"] and data["paper_helped"] == 0
        assert data["helped_rounds_full"]
        assert data["coef_gap"] < 1e-2
        assert [b["value"] for b in bars] == list(data["rounds"].values())
        stdout = "".join(o.get("text", "") for _, o in outputs(nb, "stream"))
        assert "dashboard: http://" in stdout
    elif name == "pipeline_grid_search.ipynb":
        # A bar per fit of the search (folds x candidates, and the refit), and the refit's
        # objective, one point per round.
        assert len(bars) == data["fits"] == 9
        assert data["lines"] == [data["best_rounds"]]
        if data["rounds_scored"] is not None:  # scikit-learn >= 1.9: a score per round
            assert data["rounds_scored"] == data["rounds_monitored"] >= 1
    elif name == "estimators.ipynb":
        # BSP and A-BSP with the straggler on one axis, a point per round; both syncs at
        # scikit-learn's optimum; k-means as good as scikit-learn's; ignored parameters
        # change nothing; the straggler was harvested.
        assert data["lines"] == data["rounds"]
        assert data["coef_gap"] < 1e-2  # scikit-learn stops at its own tol
        assert data["inertia_ratio"] < 1.01
        # Two BSP fits agree to well within the solver's tol, not bit for bit: the stride
        # of the rows a round's Hessian is estimated from is chosen from measured times
        # (1.2e-6 apart in one CI emulation run, 0 in others).
        assert data["ignored_change"] < 1e-5
        assert data["harvested"] > 0
        assert len(bars) == 4
    elif name == "glm_lasso_straggler.ipynb":
        # A line per sync model, a point per round; both at scikit-learn's optimum; A-BSP cut
        # the straggler short, BSP never; the lasso has scikit-learn's support, in one round.
        assert data["lines"] == data["rounds"]
        assert max(data["gaps"]) < 1e-6
        assert data["harvested"] > 0 and data["bsp_harvested"] == 0
        assert data["same_support"] and data["lasso_rounds"] == 1
        assert len(bars) == 3
    else:
        pytest.fail(f"say what {name} must show")


def test_saved_notebooks_have_their_outputs_and_no_test_code():
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        # executed in order from the top, outputs kept
        assert [c.get("execution_count") for c in code] == list(range(1, len(code) + 1)), \
            f"{path.name}: run it from the top and save it with its outputs"
        assert any(c.get("outputs") for c in code), path.name
        assert not any(c.source.lstrip().startswith("assert") for c in code), path.name


def test_notebooks_warm_the_cluster_up_before_timing_and_say_so():
    """A new cluster's first fit also pays for the workers' first imports: each notebook runs
    an untimed fit before the first one it times, and its text says so."""
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        text = " ".join(c.source for c in nb.cells if c.cell_type == "markdown")
        timed = [i for i in (code.find(s) for s in ("perf_counter()", "wall_time",
                                                    "GridSearchCV(")) if i >= 0]
        assert timed, f"{path.name} times nothing: drop this check for it"
        assert 0 <= code.find("# warm-up, untimed") < min(timed), path.name
        words = " ".join(text.split())
        assert "warms the cluster up" in words or "warm the cluster up" in words, path.name
