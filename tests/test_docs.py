"""The documentation: the Sphinx build passes with warnings as errors (numpydoc validation of
the public API included), the example code on the pages runs, the generated numbers agree with
the results files they cite, and the README keeps its two set-up commands."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

pytest.importorskip("sphinx")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"docs_{name}", DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


blocks = _load("blocks")


def test_sphinx_build_passes_with_warnings_as_errors(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(tmp_path / "doctrees"), str(DOCS), str(tmp_path / "html")],
        # Not from the repository root: ``python -m`` puts the working directory first on the
        # path, where the source daskabsp/ (without estimators/) would shadow the installed one.
        capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-10000:]
    html = tmp_path / "html"
    assert (html / "index.html").exists()
    api = (html / "api" / "engine.html").read_text()
    assert "daskabsp.fit" in api  # the reference lists the public names
    assert (html / "api" / "generated" / "daskabsp.estimators.LogisticRegression.html").exists()
    check_estimator_pages(html)
    check_gallery(html)


def check_estimator_pages(html: Path) -> None:
    """Every public method of every estimator is on the estimator's page (an entry of its
    own, with its anchor), and so is every fitted attribute its docstring lists; the
    estimators come first in the reference's index."""
    import inspect

    import daskabsp.estimators as est

    estimators = [n for n in est.__all__ if hasattr(getattr(est, n), "fit")]
    assert estimators
    for name in estimators:
        cls = getattr(est, name)
        page = (html / "api" / "generated" / f"daskabsp.estimators.{name}.html").read_text()
        methods = [m for m in dir(cls) if not m.startswith("_") and callable(getattr(cls, m))]
        assert {"fit", "get_params", "set_params"} <= set(methods)
        missing = [m for m in methods if f'id="daskabsp.estimators.{name}.{m}"' not in page]
        assert not missing, f"{name}: methods missing from its page: {missing}"
        doc = inspect.getdoc(cls)
        attributes = re.findall(r"^(\w+_) : ", doc.split("Attributes\n----------", 1)[1],
                                re.MULTILINE)
        assert "history_" in attributes
        assert all(f">{a}<" in page for a in attributes), name
    index = (html / "api" / "index.html").read_text()
    first = min(index.find(f"daskabsp.estimators.{n}.html") for n in estimators)
    others = [index.find(f"daskabsp.{n}.html") for n in ("fit", "ABSP", "Program")]
    assert 0 < first < min(i for i in others if i > 0)


def check_gallery(html: Path) -> None:
    """The gallery shows a card with a picture for every notebook of examples/."""
    notebooks = sorted((ROOT / "examples").glob("*.ipynb"))
    page = (html / "examples" / "index.html").read_text()
    assert page.count('class="sd-card-img-top"') == len(notebooks)
    for nb in notebooks:
        assert f'href="{nb.stem}.html"' in page, nb.name
        assert (html / "examples" / f"{nb.stem}.html").exists()


# -- the API reference's examples -------------------------------------------------------------

apiref = _load("apiref")


def test_every_public_class_and_function_has_runnable_examples():
    """Every class and function the reference lists has an Examples section, none of whose
    lines is skipped (``python docs/apiref.py`` runs them all)."""
    assert apiref.missing_examples() == []
    skipped = [name for name, obj in apiref.documented()
               if "+SKIP" in (obj.__doc__ or "").split("Examples", 1)[-1]]
    assert skipped == []


@pytest.mark.timeout(600)
def test_api_examples_run(tmp_path):
    proc = subprocess.run([sys.executable, str(DOCS / "apiref.py")], capture_output=True,
                          text=True, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    ran = [ln for ln in proc.stdout.splitlines() if " passed" in ln]
    assert len(ran) == len(apiref.documented())


def test_every_estimator_documents_every_sync_model():
    """The ``sync`` entry of every estimator's docstring names each value ``sync=`` takes
    and links the guide (it is written once, in ``estimators/_engine.py``)."""
    import inspect

    import daskabsp
    import daskabsp.estimators as est

    for name in est.__all__:
        cls = getattr(est, name)
        if not hasattr(cls, "fit"):
            continue
        entry = inspect.getdoc(cls).split("\nsync : ", 1)[1].split("\nn_partitions : ", 1)[0]
        for sync in daskabsp.SYNC_NAMES:
            assert f'"{sync}"' in entry and f"daskabsp.{sync.upper()}" in entry, (name, sync)
        assert "Policy" in entry and "sync-models" in entry, name


def test_docs_and_notebooks_import_nothing_private_from_scikit_learn():
    texts = [*(p.read_text() for p in DOCS.rglob("*.md")),
             *(p.read_text() for p in (ROOT / "examples").glob("*.ipynb")),
             (ROOT / "README.md").read_text()]
    assert not any("sklearn.utils._param_validation" in t for t in texts)


def test_readme_types_no_measured_number():
    """Outside its code, its program's output and its generated blocks, the README holds no
    decimal number: a measured number is generated from its results file."""
    text = blocks.BLOCK.sub("", (ROOT / "README.md").read_text())
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    assert re.findall(r"\d+\.\d+", text) == []


#: Timings and ratios as a benchmark prints them: "1.17 s", "0.58 s", "3.66x", "5-46%".
MEASURED = re.compile(r"\b\d+\.\d+ ?(?:s|ms|x)\b|\b\d+(?:\.\d+)?-\d+(?:\.\d+)?(?:x|%| s)\b")


@pytest.mark.parametrize("page", ["user-guide/sync-models.md", "deployment.md"])
def test_user_pages_type_no_measured_timing(page):
    """Outside their code and generated blocks, these pages hold no timing or ratio typed by
    hand (measured numbers come from a results file; those of runs whose results are not
    committed are in the development log)."""
    text = blocks.BLOCK.sub("", (DOCS / page).read_text())
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    assert MEASURED.findall(text) == [], MEASURED.findall(text)


#: The pages a user reads to use daskabsp (the internals are on how-it-works.md and the
#: Contributing pages).
USER_PAGES = [ROOT / "README.md", DOCS / "index.md", DOCS / "getting-started.md",
              DOCS / "deployment.md", *sorted(DOCS.glob("user-guide/*.md"))]
#: Names of the engine's internals, which a user page links to instead of naming.
INTERNALS = re.compile(r"plan_round|help_round|ski-rental|pass ledger|end game|CycleLedger|"
                       r"daskabsp\.engine\b|daskabsp/(?:engine|fitting|programs)\b|"
                       r"min_chunk_seconds|CHUNK_SECONDS_PER_STAT|\brent\b", re.IGNORECASE)


def test_config_keys_are_split_into_the_users_and_the_private_ones():
    """Every key of daskabsp.yaml is in exactly one of the two generated tables: the user's
    (tuning.md) or the private one (how-it-works.md)."""
    keys = {k.removeprefix("daskabsp.") for k, _, _ in blocks.config_rows()}
    user = {m for m in re.findall(r"^\| `daskabsp\.([\w.-]+)`", blocks.block_config(), re.M)}
    private = {m for m in re.findall(r"^\| `daskabsp\.([\w.-]+)`",
                                     blocks.block_config_private(), re.M)}
    assert user == set(blocks.USER_CONFIG)
    assert user | private == keys and not user & private
    assert "<!-- numbers:config -->" in (DOCS / "user-guide" / "tuning.md").read_text()
    assert "<!-- numbers:config-private -->" in (DOCS / "how-it-works.md").read_text()


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_user_pages_name_no_internals(page):
    """A user page names neither the engine's internals nor a private configuration key
    outside its generated blocks: it says what the user sees and links to How it works."""
    text = blocks.BLOCK.sub("", page.read_text())
    assert INTERNALS.findall(text) == [], INTERNALS.findall(text)
    private = {k for k, _, _ in blocks.config_rows()
               if k.removeprefix("daskabsp.") not in blocks.USER_CONFIG}
    named = sorted(k for k in private if re.search(re.escape(k) + r"(?![\w.-])", text))
    assert named == [], named


def test_the_capacity_bound_is_stated_with_the_numbers_it_bounds():
    """The headline states, for every worker count with a core per worker, the most BSP /
    A-BSP a sync model counting every row once per round can reach, next to the measured
    range; a measured value above it is followed by the reason."""
    doc = blocks.load("bench_fit_time")
    if doc is None:
        pytest.skip("bench_fit_time not measured")
    text = blocks.GENERATORS["headline"]()
    cores = doc["environment"]["cpu_count"]
    facts = blocks.fit_time_facts(doc)
    for (_, n), v in facts["persistent_speedup"].items():
        if n <= cores:
            bound = blocks.capacity_bound(n)
            assert f"at most {bound:.2f}x" in text
            if v > bound:
                assert "Fits can pass both" in text
    assert blocks.capacity_bound(2, 4.0) == 2.5


# -- numbers ------------------------------------------------------------------------------


def test_generated_blocks_match_their_sources():
    """Every generated block of the README and the docs is what its results file (or the
    code) gives: run ``python docs/blocks.py`` after a benchmark or a parameter changed."""
    assert blocks.stale_blocks() == []


def test_every_generated_block_has_a_generator_and_the_pages_cite_numbers():
    names = {m.group("name") for page in blocks.PAGES
             for m in blocks.BLOCK.finditer(page.read_text())}
    assert names <= set(blocks.GENERATORS)
    assert {"headline", "targets", "fit-time", "solvers", "parameters"} <= names


def test_a_number_edited_on_a_page_is_caught(tmp_path):
    page = tmp_path / "page.md"
    body = blocks.GENERATORS["targets"]()
    page.write_text(f"# t\n\n<!-- numbers:targets -->\n{body}\n<!-- /numbers:targets -->\n")
    assert blocks.stale_blocks([page]) == []
    edited = re.sub(r"\d+\.\d+", lambda m: f"{float(m.group()) + 0.5:.2f}",
                    page.read_text(), count=1)
    if edited == page.read_text():  # no number measured yet: edit a verdict instead
        edited = page.read_text().replace("not measured", "**met**", 1)
    page.write_text(edited)
    assert blocks.stale_blocks([page]) == [f"{page}: targets"]


def test_a_results_file_that_changed_is_caught(tmp_path, monkeypatch):
    """The pages claim their numbers come from the committed results files: a results file
    with other numbers makes the blocks that cite it stale."""
    pages = [p for p in blocks.PAGES
             if "<!-- numbers:fit-time -->" in p.read_text()]
    source = blocks.RESULTS / "bench_fit_time.json"
    results = tmp_path / "results"
    shutil.copytree(blocks.RESULTS, results)
    if source.exists():
        doc = json.loads(source.read_text())
        for run in doc["runs"]:
            run["seconds"] = [s * 1.5 for s in run["seconds"]]
        (results / "bench_fit_time.json").write_text(json.dumps(doc))
    else:
        (results / "bench_fit_time.json").write_text(json.dumps(
            {"benchmark": "bench_fit_time", "environment": {"cpu_count": 2},
             "runs": [{"model": "m", "scenario": "none", "sync": "bsp", "seconds": [1.0],
                       "rounds": [3]}]}))
    monkeypatch.setattr(blocks, "RESULTS", results)
    assert any(s.endswith(": fit-time") for s in blocks.stale_blocks(pages))


def test_missing_results_are_shown_as_not_measured(tmp_path, monkeypatch):
    monkeypatch.setattr(blocks, "RESULTS", tmp_path)
    text = blocks.GENERATORS["targets"]()
    assert "**met**" not in text and "**missed**" not in text
    assert "not measured" in text
    assert "Not yet measured" in blocks.GENERATORS["headline"]()


# -- code on the pages --------------------------------------------------------------------

RUN_PAGES = ["getting-started.md", "user-guide/sync-models.md", "user-guide/estimators.md",
             "user-guide/tuning.md", "user-guide/monitoring.md", "user-guide/stragglers.md",
             "user-guide/cluster-data.md", "user-guide/troubleshooting.md", "deployment.md"]
FENCE = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)```", re.DOTALL)


def page_code(page: Path) -> str:
    """The page's Python blocks in order, except those under a ``<!-- not run: why -->``
    line."""
    return "\n".join(m.group("code") for m in FENCE.finditer("\n" + page.read_text())
                     if not m.group("before").startswith("<!-- not run"))


def test_every_page_with_python_is_run_or_says_why_not():
    for page in [*DOCS.glob("*.md"), *DOCS.glob("user-guide/*.md")]:
        rel = page.relative_to(DOCS).as_posix()
        if rel in RUN_PAGES or rel == "development-log.md":
            continue
        assert not page_code(page).strip(), f"{rel} has Python blocks: add it to RUN_PAGES"


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN_PAGES)
def test_page_examples_run(page, tmp_path):
    code = page_code(DOCS / page)
    assert code.strip()
    # with -c, as in a notebook or a REPL: worker processes are spawned, and a script would
    # need ``if __name__ == "__main__":`` (the page says so)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]


# -- README -------------------------------------------------------------------------------


def test_readme_keeps_its_two_setup_commands():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```bash\n(.*?)\n```", readme, re.DOTALL)
    assert commands == ["pip install . && python -m daskabsp demo",
                        'pip install ".[test]" && pytest']
    assert (ROOT / ".ci" / "run").read_text().rstrip().endswith('pip install ".[test]" && pytest')


def test_install_commands_work_from_a_clone():
    """daskabsp installs from its source tree: every install command the README, the docs and
    the library's messages give is ``pip install ".[extra]"`` (or a path), never
    ``daskabsp[extra]``, which would look for it on a package index; the extras table is
    pyproject.toml's."""
    texts = {p: p.read_text() for p in [ROOT / "README.md", ROOT / "CONTRIBUTING.md",
                                        *DOCS.rglob("*.md"), *(ROOT / "daskabsp").rglob("*.py"),
                                        *(ROOT / "estimators").glob("*.py")]
             if p.name != "development-log.md"}
    named = {p.relative_to(ROOT).as_posix(): re.findall(r"""install ["']?daskabsp\[""", t)
             for p, t in texts.items()}
    assert {p: n for p, n in named.items() if n} == {}
    page = (DOCS / "getting-started.md").read_text()
    assert "<!-- numbers:extras -->" in page
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert all(f"| `{name}` |" in page for name in extras)


def test_version_is_the_installed_distributions():
    """``daskabsp.__version__`` (the site's version, and what a client-worker version check
    compares) is the installed distribution's, not a number typed twice."""
    from importlib.metadata import version

    import daskabsp

    assert daskabsp.__version__ == version("daskabsp") != "0+unknown"
