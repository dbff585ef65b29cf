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

import importlib
import shutil
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
html_static_path: list[str] = []
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 8,
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_sidebars = {"index": [], "changelog": []}

# -- API reference ------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"  # numpydoc's Parameters sections say the types
autodoc_default_options = {"members": False}
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
    # Internals still exported by daskabsp.__all__, which the engine's reorganisation
    # (issue 20) takes out of the top level; they are listed in the reference until then.
    r"^daskabsp\.(run_partition|PartialResult|AbspSchedulerPlugin|AbspWorkerPlugin|"
    r"compute_answering|answering_workers|stuck_keys|as_policy|get_client)$",
    r"\.__init__$",
    r"\.__call__$",
    # scikit-learn's inherited methods are scikit-learn's docstrings
    r"\.(get_params|set_params|get_metadata_routing|set_fit_request|set_score_request|"
    r"set_output|fit_transform|fit_predict|set_predict_request|set_transform_request|"
    r"set_callbacks|score)$",
}

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

#: The modules whose public names make the API reference: page, title.
API_MODULES = {
    "daskabsp": ("engine", "The engine"),
    "daskabsp.programs": ("programs", "Programs"),
    "daskabsp.estimators": ("estimators", "Estimators"),
}


def _public_names(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in dir(module) if not n.startswith("_")]
    return sorted(names, key=str.lower)


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def write_api_lists() -> None:
    """One API page per public module, listing its ``__all__`` (written before the sources
    are read, so the reference follows whatever the modules export)."""
    out = HERE / "api"
    seen: dict[int, str] = {}  # an object exported by two modules is described once
    for module_name, (page, title) in API_MODULES.items():
        module = importlib.import_module(module_name)
        names, also = [], []
        for name in _public_names(module_name):
            key = id(getattr(module, name))
            if key in seen:
                also.append(f"{{obj}}`{seen[key]}`")
            else:
                seen[key] = f"{module_name}.{name}"
                names.append(name)
        lines = [f"# {title}: `{module_name}`", "", "```{eval-rst}",
                 f".. automodule:: {module_name}", "   :no-members:", "",
                 f".. currentmodule:: {module_name}", "",
                 ".. autosummary::", "   :toctree: generated", "   :nosignatures:", ""]
        lines += [f"   {name}" for name in names]
        lines += ["```", ""]
        if also:
            lines += [f"Also exported here, and described above: {', '.join(also)}.", ""]
        _write_if_changed(out / f"{page}.md", "\n".join(lines))


def copy_notebooks() -> None:
    """The notebooks of ``examples/`` into ``docs/examples/`` (a build artefact)."""
    target = HERE / "examples"
    target.mkdir(exist_ok=True)
    for nb in sorted((ROOT / "examples").glob("*.ipynb")):
        dest = target / nb.name
        if not dest.exists() or dest.read_bytes() != nb.read_bytes():
            shutil.copyfile(nb, dest)


write_api_lists()
copy_notebooks()
