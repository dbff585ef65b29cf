"""What the API reference lists, and the check that each listed object shows how to use it.

The reference follows the modules' ``__all__``, so a new estimator, policy or program needs
no edit here:

* **Estimators**: every name in ``daskabsp.estimators.__all__``, first;
* the names of ``daskabsp.__all__``, grouped by the module that defines them: **sync
  models** (the policies), **fitting with the engine**, **monitoring**, **emulated
  stragglers**;
* **programs**: the :class:`~daskabsp.programs.Program` classes of
  ``daskabsp.programs.__all__`` and the records of their contract (what a program author
  needs); the helper functions and classes programs share with each other are internal and
  left out.

``python docs/apiref.py`` runs the Examples section of every listed class and function as a
doctest (``tests/test_docs.py`` does too) and lists those without one.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import sys
from dataclasses import dataclass, field
from types import ModuleType


@dataclass
class Section:
    """One page of the reference."""

    page: str
    title: str
    #: Markdown (MyST): the pages are Markdown
    intro: str
    module: str
    names: list[str] = field(default_factory=list)


#: Parts of a defining module's dotted name that put a name of ``daskabsp.__all__`` in a
#: section (the first match wins; anything else goes to "engine").
_GROUPS = [("sync", ("policies",)), ("monitoring", ("callbacks", "plot", "monitor", "history")),
           ("stragglers", ("stragglers", "lab")), ("programs", ("programs",))]


def _public(module_name: str) -> tuple[ModuleType, list[str]]:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    return module, sorted(names, key=str.lower)


def _group(obj, name: str, module: ModuleType) -> str:
    where = getattr(obj, "__module__", None) if inspect.isclass(obj) or callable(obj) else None
    # a constant: the module its package imports it from (daskabsp loads its names lazily)
    where = where or getattr(module, "_LAZY", {}).get(name) or getattr(obj, "__name__", "")
    parts = set(str(where).split("."))
    for group, keys in _GROUPS:
        if parts & set(keys):
            return group
    return "engine"


def sections() -> list[Section]:
    """The pages of the reference, in order, each with its names (none listed twice)."""
    est = Section(
        "estimators", "Estimators", "scikit-learn estimators whose fits run on a Dask cluster: "
        "swap the import, keep the code. Each takes its scikit-learn counterpart's parameters "
        "plus the engine's (``sync``, ``n_partitions``, ``quota``, ``chunk_target``).",
        "daskabsp.estimators")
    sync = Section("sync", "Sync models", "The policies ``sync=`` takes, by name (``\"absp\"``, "
                   "``\"bsp\"``, ``\"ssp\"``, ``\"asp\"``) or as objects with other settings. "
                   "The [sync models guide](../user-guide/sync-models.md) says when to "
                   "choose which, with measurements.", "daskabsp")
    engine = Section("engine", "Fitting with the engine", "Run any program under any sync "
                     "model, place rows once for several fits, and the embedded cluster.",
                     "daskabsp")
    monitoring = Section("monitoring", "Monitoring", "Watching a fit: callbacks around its "
                         "rounds, a progress bar, plots of its record.", "daskabsp")
    stragglers = Section("stragglers", "Emulated stragglers", "Slowing chosen workers down, "
                         "to see what a sync model does with a straggler on your own data.",
                         "daskabsp")
    programs = Section("programs", "Programs", "Iterative algorithms written as additive "
                       "statistics over rows and an update, which the engine runs under any "
                       "sync model: the estimators' own, and the contract for writing one.",
                       "daskabsp.programs")
    by_page = {s.page: s for s in (est, sync, engine, monitoring, stragglers, programs)}
    seen: set[int] = set()

    module, names = _public("daskabsp.estimators")
    # the estimators, then what else the module exports (its exception)
    names.sort(key=lambda n: not hasattr(getattr(module, n), "fit"))
    for n in names:
        seen.add(id(getattr(module, n)))
        est.names.append(n)
    module, names = _public("daskabsp")
    for n in names:
        obj = getattr(module, n)
        if id(obj) in seen:
            continue
        group = _group(obj, n, module)
        if group == "programs":
            continue  # listed from daskabsp.programs, below
        seen.add(id(obj))
        by_page[group].names.append(n)
    programs_module, names = _public("daskabsp.programs")
    base = programs_module.Program
    for n in names:
        obj = getattr(programs_module, n)
        contract = inspect.isclass(obj) and (
            issubclass(obj, base) or obj.__module__ == base.__module__)
        if contract and id(obj) not in seen:
            seen.add(id(obj))
            programs.names.append(n)
    return [s for s in by_page.values() if s.names]


def documented() -> list[tuple[str, object]]:
    """``(dotted name, object)`` of every class and function the reference lists (and the
    functions of a module it lists)."""
    out = []
    for s in sections():
        module = importlib.import_module(s.module)
        for n in s.names:
            obj = getattr(module, n)
            if inspect.ismodule(obj):
                for fn in getattr(obj, "__all__", None) or [
                        f for f, v in vars(obj).items() if inspect.isfunction(v)
                        and v.__module__ == obj.__name__ and not f.startswith("_")]:
                    out.append((f"{s.module}.{n}.{fn}", getattr(obj, fn)))
            elif inspect.isclass(obj) or inspect.isfunction(obj):
                out.append((f"{s.module}.{n}", obj))
    return out


def has_examples(obj) -> bool:
    return "Examples\n--------" in (inspect.getdoc(obj) or "")


def missing_examples() -> list[str]:
    """The listed classes and functions whose docstring has no Examples section."""
    return [name for name, obj in documented() if not has_examples(obj)]


def run_examples(verbose: bool = False) -> dict[str, tuple[int, int]]:
    """Run the Examples of every listed class and function as doctests; ``{name: (failed,
    attempted)}``. Each docstring runs in a namespace of its own."""
    parser = doctest.DocTestParser()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    out = {}
    for name, obj in documented():
        doc = inspect.getdoc(obj) or ""
        if "Examples\n--------" not in doc:
            continue
        examples = doc.split("Examples\n--------", 1)[1]
        test = parser.get_doctest(examples, {}, name, None, 0)
        runner = doctest.DocTestRunner(optionflags=flags, verbose=verbose)
        result = runner.run(test, out=sys.stdout.write)
        out[name] = (result.failed, result.attempted)
    return out


if __name__ == "__main__":
    missing = missing_examples()
    results = run_examples()
    for name, (failed, attempted) in results.items():
        print(f"{name}: {attempted - failed} of {attempted} passed")
    for name in missing:
        print(f"{name}: no Examples section")
    sys.exit(1 if missing or any(f for f, _ in results.values()) else 0)
