"""The architecture's rules as tests, read from the source with :mod:`ast` (nothing here imports
the modules it checks): imports point down the layers, no private name crosses a package
border, the estimators use only exported names, no import cycle, and one writer per state (an
object's attributes are assigned by its own class's code only). Sizes of classes and functions
are review advice, not a rule: a class split for size instead of meaning is worse than a long one.

Each rule is a function of a source tree root (the folder that holds ``daskabsp/`` and
``estimators/``) that returns its violations as sentences, empty when the tree keeps it. The
tests run every rule on the real tree, and on a small fake tree in ``tmp_path`` with one
planted violation that the rule must report (and nothing else): a rule that cannot fail
proves nothing.
"""

from __future__ import annotations

import ast
from collections import defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The layers, lowest first. A unit is a first-level package or module of ``daskabsp``
#: (``engine``, ``fitting``; ``__init__`` is the facade ``daskabsp`` itself) or ``estimators``
#: (installed as ``daskabsp.estimators``). A unit imports only units of a *lower* layer (and
#: itself). The table is read off the tree as it is, which already points one way:
#:
#: * the leaves import nothing of daskabsp: settings, the sync models' decisions (pure), and
#:   the programs (pure numerics: a program knows nothing of Dask or of the engine);
#: * the services read only leaves: option checks (``validation`` reads the policies), finding
#:   a client (``cluster``), and the Dask extension, which never imports the engine (its
#:   scheduler and worker plugins run far from the driver and load only what they need);
#: * the watchers read the extension's wire types: the fit history, reports and callbacks on
#:   the driver (``monitor``) and the dashboard page, a scheduler preload;
#: * the engine, the driver's side of a fit, reads all of the above;
#: * the entry points over the engine: ``fitting`` (``fit``, ``place``) and ``answering``;
#: * the lab (simulator, straggler emulation, fault schedules, datasets, demo) drives fits and
#:   may use anything below; nothing in the library's own layers imports it;
#: * the facade ``daskabsp`` (its ``__init__``, lazily, and ``python -m daskabsp``) names the
#:   public API, gathered from every layer;
#: * the estimators sit on top of everything: the scikit-learn face on the exported API.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("leaves", frozenset({"config", "policies", "programs"})),
    ("services", frozenset({"validation", "cluster", "extension"})),
    ("watchers", frozenset({"monitor", "dashboard"})),
    ("engine", frozenset({"engine"})),
    ("entry points", frozenset({"fitting", "answering"})),
    ("lab", frozenset({"lab"})),
    ("facade", frozenset({"__init__", "__main__"})),
    ("estimators", frozenset({"estimators"})),
)
RANK = {unit: rank for rank, (_, units) in enumerate(LAYERS) for unit in units}

#: Whatever the table says, these never import these: the library's own layers stay usable
#: without the lab's tools and without scikit-learn's face.
NEVER = {unit: frozenset({"lab", "estimators"}) for unit in ("engine", "extension", "programs")}

#: Attribute names that objects of the libraries daskabsp drives also carry (bokeh models and
#: ranges, scipy.sparse matrices, tqdm bars): a write of one of them to an object that is not
#: ``self`` is taken for the library's, not for one of ours that shares the name.
LIBRARY_ATTRIBUTES = frozenset({"data", "start", "title", "options", "value", "factors", "tags",
                                "text", "total", "theme", "max", "indices"})


# -- reading the tree -------------------------------------------------------------------------


@dataclass(frozen=True)
class Module:
    name: str  # dotted: daskabsp.engine.plan; estimators/x.py is daskabsp.estimators.x
    path: Path
    package: bool  # an __init__.py
    tree: ast.Module


@dataclass(frozen=True)
class Import:
    importer: str  # the module holding the statement
    target: str  # the module the statement names: `from target import name`, `import target`
    name: str | None  # the name imported from it; None for `import target`
    asname: str | None
    line: int

    @property
    def dotted(self) -> str:
        return self.target if self.name is None else f"{self.target}.{self.name}"


@cache
def _read(root: Path) -> tuple[dict[str, Module], tuple[Import, ...]]:
    modules = {}
    for folder, package in (("daskabsp", "daskabsp"), ("estimators", "daskabsp.estimators")):
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            is_init = parts[-1] == "__init__"
            name = ".".join([package, *(parts[:-1] if is_init else parts)])
            modules[name] = Module(name, path, is_init, ast.parse(path.read_text(), str(path)))
    imports = []
    for module in modules.values():
        for node in ast.walk(module.tree):  # local and typing-only imports included
            if isinstance(node, ast.ImportFrom):
                target = _resolve(module, node)
                imports += [Import(module.name, target, a.name, a.asname, node.lineno)
                            for a in node.names if _ours(target)]
            elif isinstance(node, ast.Import):
                imports += [Import(module.name, a.name, None, a.asname, node.lineno)
                            for a in node.names if _ours(a.name)]
    return modules, tuple(imports)


def read(root: Path) -> tuple[dict[str, Module], tuple[Import, ...]]:
    """The tree's modules and its imports of daskabsp (parsed once per root)."""
    return _read(Path(root).resolve())


def _ours(target: str) -> bool:
    return target == "daskabsp" or target.startswith("daskabsp.")


def _resolve(module: Module, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.name.split(".")
    if not module.package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def loaded(imp: Import, modules: dict[str, Module]) -> str:
    """The module an import loads: `from a import b` loads a.b where b is a submodule."""
    return imp.dotted if imp.dotted in modules else imp.target


def unit(module: str) -> str:
    """The layer unit: daskabsp.engine.plan -> engine; daskabsp -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def border(module: str, modules: dict[str, Module]) -> str:
    """The first-level package a module lies in: daskabsp.engine, daskabsp.estimators, or
    daskabsp itself for its flat modules."""
    first = ".".join(module.split(".")[:2])
    return first if first in modules and modules[first].package else "daskabsp"


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def where(imp: Import) -> str:
    return f"{imp.importer}:{imp.line}"


# -- the rules ----------------------------------------------------------------------------------


def upward_imports(root: Path) -> list[str]:
    """(a) Every import points down the layers (:data:`LAYERS`), and nothing in the engine,
    the extension or the programs imports the lab or the estimators."""
    modules, imports = read(root)
    found = set()
    for imp in imports:
        dst = loaded(imp, modules)
        a, b = unit(imp.importer), unit(dst)
        if a == b:
            continue
        missing = [u for u in (a, b) if u not in RANK]
        if missing:
            found |= {f"{u} is in no layer: give it a rank in LAYERS" for u in missing}
            continue
        if b in NEVER.get(a, ()):
            found.add(f"{where(imp)} imports {dst}: {a} never imports {b}")
        elif RANK[b] >= RANK[a]:
            found.add(f"{where(imp)} imports {dst}: {a} (layer "
                      f"{LAYERS[RANK[a]][0]!r}) may import only from layers below it, "
                      f"{b} is in {LAYERS[RANK[b]][0]!r}")
    return sorted(found)


def private_imports(root: Path) -> list[str]:
    """(b) No private name (``_x``, a module or a name in one) is imported across the border
    of a first-level package (``daskabsp.<pkg>``, ``daskabsp.estimators``; the flat modules
    of ``daskabsp`` share the package ``daskabsp``)."""
    modules, imports = read(root)
    found = []
    for imp in imports:
        theirs = border(loaded(imp, modules), modules)
        if theirs == border(imp.importer, modules):
            continue
        inside = imp.dotted.split(".")[1:]
        if any(private(part) for part in inside):
            found.append(f"{where(imp)} imports {imp.dotted}, private to {theirs}")
    return found


def estimator_imports(root: Path) -> list[str]:
    """(c) The estimators take from daskabsp only names in the ``__all__`` of the module they
    take them from: what they import, and what they reach as attributes of an imported module
    (``import daskabsp`` then ``daskabsp.fit``)."""
    modules, imports = read(root)
    exports = {name: _all_of(m.tree) for name, m in modules.items()}
    found = []
    aliases: dict[str, dict[str, str]] = defaultdict(dict)  # estimator module -> name -> module

    def check(importer: str, module: str, name: str, line: int) -> None:
        if name not in exports.get(module, ()):
            found.append(f"{importer}:{line} takes {module}.{name}, not in {module}.__all__")

    for imp in imports:
        if not _estimator(imp.importer) or _estimator(imp.target):
            continue
        if imp.name is None:  # import daskabsp[.x] [as y]
            bound = imp.asname or "daskabsp"
            aliases[imp.importer][bound] = imp.target if imp.asname else "daskabsp"
        elif imp.dotted in modules:  # from daskabsp import programs: a module
            aliases[imp.importer][imp.asname or imp.name] = imp.dotted
        else:
            check(imp.importer, imp.target, imp.name, imp.line)
    for importer, bound in aliases.items():
        for base, attrs, line in _chains(modules[importer].tree):
            module = bound.get(base)
            for attr in attrs if module else ():
                if _estimator(module):
                    break
                if f"{module}.{attr}" in modules:
                    module = f"{module}.{attr}"
                    continue
                check(importer, module, attr, line)
                break
    return found


def import_cycles(root: Path) -> list[str]:
    """(d) No import cycle between modules, counting every import statement (typing-only and
    function-local ones too: they hide a cycle, they do not break it)."""
    modules, imports = read(root)
    graph: dict[str, set[str]] = defaultdict(set)
    for imp in imports:
        dst = loaded(imp, modules)
        if dst in modules and dst != imp.importer:
            graph[imp.importer].add(dst)
    return [f"import cycle: {' -> '.join(_shortest_cycle(graph, component))}"
            for component in _components(graph)]


def foreign_writes(root: Path) -> list[str]:
    """(e) One writer per state: an attribute of an object of one of our classes is assigned
    (or deleted) only by code of the module that defines the class, through ``self``/``cls``
    or a local object it made. Read by name: ``obj.name = ...`` where ``obj`` is not ``self``
    or ``cls`` is a foreign write when ``name`` is an attribute (a field, a class annotation or
    a ``self.name =`` of a method) of classes of ours none of which the writing module defines,
    and not a name in :data:`LIBRARY_ATTRIBUTES`. A state another module must change is
    changed through a method of its owner."""
    modules, _ = read(root)
    owners: dict[str, set[str]] = defaultdict(set)
    for module in modules.values():
        for cls in (n for n in ast.walk(module.tree) if isinstance(n, ast.ClassDef)):
            for name in _attributes(cls):
                owners[name].add(module.name)
    found = []
    for module in modules.values():
        for node, target in _stores(module.tree):
            name = target.attr
            base = target.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if name not in owners or name in LIBRARY_ATTRIBUTES or module.name in owners[name]:
                continue
            found.append(f"{module.name}:{node.lineno} writes {ast.unparse(target)}, an "
                         f"attribute of a class of {', '.join(sorted(owners[name]))}")
    return found


RULES = (upward_imports, private_imports, estimator_imports, import_cycles, foreign_writes)


# -- helpers of the rules -----------------------------------------------------------------------


def _estimator(module: str) -> bool:
    return module == "daskabsp.estimators" or module.startswith("daskabsp.estimators.")


def _all_of(tree: ast.Module) -> frozenset[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                return frozenset(ast.literal_eval(node.value))
    return frozenset()


def _chains(tree: ast.Module) -> Iterator[tuple[str, list[str], int]]:
    """Every maximal attribute chain on a name: ``a.b.c`` gives ("a", ["b", "c"], line)."""
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            attrs, value = [], node
            while isinstance(value, ast.Attribute):
                attrs.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name):
                yield value.id, attrs[::-1], node.lineno


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def _shortest_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, for the message."""
    start, inside = component[0], set(component)
    came: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v] & inside):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(came[path[-1]])
                return [*path[::-1], start]
            if w not in came:
                came[w] = v
                queue.append(w)
    return component  # not reached: a component of two or more modules holds a cycle


def _attributes(cls: ast.ClassDef) -> Iterator[str]:
    """A class's attributes: annotated names in its body and ``self.x`` its methods assign."""
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            yield node.target.id
    for _node, target in _stores(cls):
        if isinstance(target.value, ast.Name) and target.value.id == "self":
            yield target.attr


def _stores(tree: ast.AST) -> Iterator[tuple[ast.stmt, ast.Attribute]]:
    """Every attribute an assignment, augmented assignment or ``del`` stores into or deletes
    (also inside tuples), with its statement."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store | ast.Del):
                    yield node, sub


# -- the tree keeps the rules -------------------------------------------------------------------


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.__name__)
def test_the_tree_keeps_the_rule(rule):
    found = rule(ROOT)
    assert not found, "\n".join(found)


def test_the_layer_table_keeps_the_lab_and_the_estimators_on_top():
    """Every unit in the tree has a layer, and no library layer lies above the lab's."""
    modules, _ = read(ROOT)
    assert {unit(name) for name in modules} <= set(RANK)
    for a in NEVER:
        assert all(RANK[a] < RANK[b] for b in NEVER[a])


# -- each rule reports a planted violation ------------------------------------------------------


def make(root: Path, files: dict[str, str]) -> Path:
    """A small fake source tree: ``files`` (path -> source) and the packages' ``__init__``s."""
    for path, text in files.items():
        for parent in reversed(Path(path).parents):
            if parent.name:
                (root / parent).mkdir(exist_ok=True)
                (root / parent / "__init__.py").touch()
        (root / path).write_text(text)
    (root / "estimators").mkdir(exist_ok=True)
    return root


#: Per rule, a small tree with one violation (the line marked "planted") and what the rule
#: must say of it, and of nothing else in the tree.
PLANTED = [
    pytest.param(upward_imports, {
        "daskabsp/engine/plan.py": "from ..extension import RoundId\n",
        "daskabsp/extension/__init__.py": "from ._core import RoundId\n__all__ = ['RoundId']\n",
        "daskabsp/extension/_core.py": "from ..policies import BSP\n"
                                       "from ..engine.plan import settle  # planted\n",
        "daskabsp/policies.py": "BSP = 1\n",
    }, ["daskabsp.extension._core:2 imports daskabsp.engine.plan: extension (layer "
        "'services') may import only from layers below it, engine is in 'engine'"],
        id="upward import"),
    pytest.param(upward_imports, {  # even a typing-only import, inside a function
        "daskabsp/programs/base.py": "def slow():\n"
                                     "    if TYPE_CHECKING:\n"
                                     "        from ..lab import stragglers  # planted\n",
        "daskabsp/lab/stragglers.py": "from ..programs.base import slow\n",
    }, ["daskabsp.programs.base:3 imports daskabsp.lab.stragglers: programs never imports lab"],
        id="programs import the lab"),
    pytest.param(upward_imports, {
        "daskabsp/newcomer.py": "from .policies import BSP  # planted\n",
        "daskabsp/policies.py": "BSP = 1\n",
    }, ["newcomer is in no layer: give it a rank in LAYERS"], id="unit without a layer"),
    pytest.param(private_imports, {
        "daskabsp/engine/link.py": "from ..extension import RoundId\n"
                                   "from ..extension._core import RoundId as R  # planted\n",
        "daskabsp/extension/__init__.py": "from ._core import RoundId\n",
        "daskabsp/extension/_core.py": "from ._wire import _HANDLER\nRoundId = 1\n",
        "daskabsp/extension/_wire.py": "_HANDLER = 'x'\n",
    }, ["daskabsp.engine.link:2 imports daskabsp.extension._core.RoundId, "
        "private to daskabsp.extension"], id="private module"),
    pytest.param(private_imports, {
        "estimators/_ridge.py": "from ._engine import _fit\n"
                                "from daskabsp.policies import _private  # planted\n",
        "estimators/_engine.py": "def _fit():\n    pass\n",
        "daskabsp/policies.py": "from .validation import _check\n_private = 1\n",
        "daskabsp/validation.py": "def _check():\n    pass\n",
    }, ["daskabsp.estimators._ridge:2 imports daskabsp.policies._private, private to daskabsp"],
        id="private name"),
    pytest.param(estimator_imports, {
        "estimators/_ridge.py": "from daskabsp.engine.plan import plan_round\n"
                                "from daskabsp.engine.plan import settle  # planted\n",
        "daskabsp/engine/plan.py": "__all__ = ['plan_round']\n",
    }, ["daskabsp.estimators._ridge:2 takes daskabsp.engine.plan.settle, "
        "not in daskabsp.engine.plan.__all__"], id="estimators import"),
    pytest.param(estimator_imports, {
        "estimators/_ridge.py": "import daskabsp\n"
                                "from daskabsp import programs\n\n\n"
                                "def run():\n"
                                "    daskabsp.fit(programs.gram.solve, daskabsp.estimators.x)\n"
                                "    return daskabsp.programs.gram.hidden  # planted\n",
        "daskabsp/__init__.py": "__all__ = ['fit']\n",
        "daskabsp/programs/gram.py": "__all__ = ['solve']\n",
    }, ["daskabsp.estimators._ridge:7 takes daskabsp.programs.gram.hidden, "
        "not in daskabsp.programs.gram.__all__"], id="estimators attribute"),
    pytest.param(import_cycles, {  # a typing-only import closes it: a cycle all the same
        "daskabsp/engine/run.py": "from .loop import RoundLoop\n",
        "daskabsp/engine/loop.py": "from .book import Book\n",
        "daskabsp/engine/book.py": "if TYPE_CHECKING:\n    from .run import FitRun  # planted\n",
    }, ["import cycle: daskabsp.engine.book -> daskabsp.engine.run -> daskabsp.engine.loop "
        "-> daskabsp.engine.book"], id="import cycle"),
    # a write into another module's object; its own module's writes, writes through self, and
    # a library attribute of the same name as one of ours do not count
    pytest.param(foreign_writes, {
        "daskabsp/engine/partitions.py": "from dataclasses import dataclass\n\n\n"
                                         "@dataclass\nclass Partitions:\n    copies: list\n"
                                         "    data: list\n\n"
                                         "    def drop(self):\n        self.copies = []\n\n\n"
                                         "def fresh(p):\n    p.copies = []\n",
        "daskabsp/engine/placement.py": "class Placement:\n"
                                        "    def __init__(self, parts):\n"
                                        "        self.parts = parts\n"
                                        "        self.parts.data = 1\n"
                                        "        self.parts.copies = []  # planted\n",
    }, ["daskabsp.engine.placement:5 writes self.parts.copies, an attribute of a class of "
        "daskabsp.engine.partitions"], id="foreign write"),
]


@pytest.mark.parametrize(("rule", "files", "expected"), PLANTED)
def test_a_planted_violation_is_reported(tmp_path, rule, files, expected):
    assert rule(make(tmp_path, files)) == expected
