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


def _blocks_module():
    spec = importlib.util.spec_from_file_location("docs_blocks", DOCS / "blocks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


blocks = _blocks_module()


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
             "deployment.md"]
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
