"""Sphinx configuration of the daskabsp documentation.

Build with ``sphinx-build -W -b html docs docs/_build/html`` (``pip install ".[docs]"``). The
build needs no network: the intersphinx inventories are in ``docs/_intersphinx/``. Before
reading the sources it writes two things that follow the code, not hand-kept lists:

* ``docs/api/{engine,programs,estimators}.md``: the autosummary lists of ``daskabsp.__all__``,
  ``daskabsp.programs.__all__`` and ``daskabsp.estimators.__all__``;
* ``docs/examples/*.ipynb``: copies of the notebooks in ``examples/`` (rendered with their
  saved outputs; the test suite executes them, ``tests/test_examples.py``).
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import sys
from pathlib import Path

import daskabsp

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

project = "daskabsp"
author = "The daskabsp developers"
copyright = "2026, The daskabsp developers"
version = release = daskabsp.__version__

extensions = [
    "myst_nb",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx_design",
]

# .rst first: autosummary writes its stub pages (reStructuredText) with the first suffix.
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = [
    "_build", "_intersphinx", "_templates", "**.ipynb_checkpoints",
]
templates_path = ["_templates"]

myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 4
# Notebooks are shown with the outputs they were saved with; the tests execute them.
nb_execution_mode = "off"

html_theme = "pydata_sphinx_theme"
html_title = f"daskabsp {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
# "fit()" in a page's table of contents, not "LogisticRegression.fit()"
toc_object_entries_show_parents = "hide"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 8,
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_sidebars = {"index": [], "changelog": [], "examples/index": []}

# -- API reference ------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"  # numpydoc's Parameters sections say the types
autodoc_default_options: dict = {}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = False
# The public API's docstrings must pass these checks (warnings are errors with -W): every
# parameter documented, none unknown, types spelled as numpydoc spells them; a summary line;
# returns described. (Not PR03, the order: the dataclass programs list their own parameters
# before those of the base class, which their signatures put first.)
numpydoc_validation_checks = {"PR01", "PR02", "PR06", "PR10", "GL08", "SS01", "RT03"}
# Records (dataclasses) document their fields as Attributes, which are also their
# constructor's parameters.
numpydoc_validation_overrides = {"PR01": [r"Attributes\n\s*-{10}"]}
numpydoc_validation_exclude = {
    # The methods of programs, policies and plugins are the engine's side of their
    # contracts (shown on their pages, described in the classes' docstrings); what users
    # call is validated: the classes, the functions, the estimators' methods.
    r"^daskabsp\.programs\.\w+\.\w+$",
    r"^daskabsp\.(ABSP|BSP|SSP|ASP|Policy)\.(?!published$)\w+$",
    r"^daskabsp\.\w+\.(setup|teardown|transition|on_fit_begin|on_fit_end|on_round_begin|"
    r"on_round_end)$",
    r"\.__init__$",
    r"\.__call__$",
    # scikit-learn's inherited methods are scikit-learn's docstrings
    r"\.(get_params|set_params|get_metadata_routing|set_fit_request|set_score_request|"
    r"set_output|fit_transform|fit_predict|set_predict_request|set_transform_request|"
    r"set_callbacks|score)$",
}

def _plain_foreign_refs(app, what, name, obj, options, lines) -> None:
    """Docstrings of other projects' methods that the estimators and plugins inherit
    (scikit-learn's ``set_output``, distributed's ``WorkerPlugin.transition``) cross-refer to
    pages of their own sites that no inventory lists: their ``:ref:`` and ``:doc:`` roles
    become plain text."""
    module = getattr(obj, "__module__", None) or ""
    if module.split(".")[0] in ("sklearn", "distributed"):
        text = _FOREIGN_REF.sub(lambda m: " ".join((m.group(1) or m.group(2)).split()),
                                "\n".join(lines))
        lines[:] = text.split("\n")


_FOREIGN_REF = re.compile(r":(?:ref|doc):`(?:([^`<]+?)\s*<[^>]+>|([^`]+))`")


def setup(app) -> None:
    app.connect("autodoc-process-docstring", _plain_foreign_refs)


intersphinx_mapping = {
    name: (url, str(HERE / "_intersphinx" / f"{name}.inv"))
    for name, url in {
        "python": "https://docs.python.org/3/",
        "numpy": "https://numpy.org/doc/stable/",
        "scipy": "https://docs.scipy.org/doc/scipy/",
        "sklearn": "https://scikit-learn.org/stable/",
        "dask": "https://docs.dask.org/en/stable/",
        "distributed": "https://distributed.dask.org/en/stable/",
        "xarray": "https://docs.xarray.dev/en/stable/",
    }.items()
}

#: What the API reference lists, page by page (``docs/apiref.py``: from the modules' __all__).
sys.path.insert(0, str(HERE))
import apiref  # noqa: E402


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)  # docs/api/ holds only generated pages
        path.write_text(text)


def write_api_pages() -> None:
    """The reference's index and one page per section of :func:`apiref.sections` (written
    before the sources are read, so the reference follows whatever the modules export)."""
    out = HERE / "api"
    pages = apiref.sections()
    for s in pages:
        lines = [f"# {s.title}", "", s.intro, "", "```{eval-rst}",
                 f".. currentmodule:: {s.module}", "",
                 ".. autosummary::", "   :toctree: generated", "", *(f"   {n}" for n in s.names),
                 "```", ""]
        _write_if_changed(out / f"{s.page}.md", "\n".join(lines))
    index = ["# API reference", "",
             "Generated from the docstrings of the public names: `daskabsp.estimators.__all__`, "
             "`daskabsp.__all__` and the programs of `daskabsp.programs.__all__`. A name that "
             "is not listed here is internal and may change without notice. Every class and "
             "function has an Examples section, run by the test suite.", ""]
    for s in pages:
        index += [f"## [{s.title}]({s.page}.md)", "", s.intro, "", ", ".join(
            f"{{obj}}`~{s.module}.{n}`" for n in s.names), ""]
    index += ["```{toctree}", ":hidden:", "", *(s.page for s in pages), "```", ""]
    _write_if_changed(out / "index.md", "\n".join(index))


def _notebook_title(nb: dict, default: str) -> tuple[str, str]:
    """The notebook's first heading and the first paragraph after it."""
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"]).strip()
        if text.startswith("# "):
            head, _, rest = text.partition("\n")
            para = rest.strip().split("\n\n")[0].replace("\n", " ")
            first = para.split(". ")[0].rstrip(".")
            return head[2:].strip(), f"{first}." if first else ""
    return default, ""


def _thumbnail(nb: dict) -> bytes | None:
    """The picture of a notebook: the PNG output of the cell tagged ``gallery-thumbnail``,
    or else its last PNG output."""
    pngs, tagged = [], None
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            png = o.get("data", {}).get("image/png")
            if png:
                pngs.append(png)
                if "gallery-thumbnail" in cell.get("metadata", {}).get("tags", []):
                    tagged = png
    png = tagged or (pngs[-1] if pngs else None)
    return None if png is None else base64.b64decode("".join(png) if isinstance(png, list)
                                                     else png)


def write_gallery() -> None:
    """``docs/examples/``: the notebooks of ``examples/`` (rendered with their saved outputs;
    the tests execute them, ``tests/test_examples.py``), a picture of each taken from its
    outputs, and the gallery page: a card per notebook, with its title, its first paragraph
    and its picture."""
    target = HERE / "examples"
    (target / "thumbnails").mkdir(parents=True, exist_ok=True)
    cards = []
    for nb_path in sorted((ROOT / "examples").glob("*.ipynb")):
        dest = target / nb_path.name
        if not dest.exists() or dest.read_bytes() != nb_path.read_bytes():
            shutil.copyfile(nb_path, dest)
        nb = json.loads(nb_path.read_text())
        title, para = _notebook_title(nb, nb_path.stem)
        png = _thumbnail(nb)
        card = [f":::{{grid-item-card}} {title}", f":link: {nb_path.stem}", ":link-type: doc"]
        if png is not None:
            thumb = target / "thumbnails" / f"{nb_path.stem}.png"
            if not thumb.exists() or thumb.read_bytes() != png:
                thumb.write_bytes(png)
            card.append(f":img-top: thumbnails/{nb_path.stem}.png")
        cards += [*card, para, ":::"]
    page = ["# Examples", "",
            "Notebooks from the repository's `examples/` folder, shown with the outputs they "
            "were saved with (run on a 2-core machine; your numbers will differ). The test "
            "suite executes each one from top to bottom (`tests/test_examples.py`). A new "
            "notebook in `examples/` appears here, with the picture of the cell tagged "
            "`gallery-thumbnail` (or its last figure).", "",
            "::::{grid} 1 2 2 3", ":gutter: 3", "", *cards, "::::", "",
            "```{toctree}", ":hidden:", "",
            *(p.stem for p in sorted((ROOT / "examples").glob("*.ipynb"))), "```", ""]
    _write_if_changed(target / "index.md", "\n".join(page))


write_api_pages()
write_gallery()
