"""The package's layering, read from its source with ``ast`` (nothing is imported).

Every ``import`` and ``from … import`` of a rankopt module counts — at module
level, under ``if TYPE_CHECKING:`` or inside a function — because a reader
following a name walks them all.  The import graph must have no circle, and
the layers must point one way: estimators → engine / model plugins → losses
and inference kernels, with the plugin registry above the layers it
resolves names for.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rankopt"


def _module_names() -> dict[str, Path]:
    """Dotted module name → file, for every .py, .pyx and .pxd module of the package (a .pxd beside its
    .pyx is the same module, read together)."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")) + sorted(PACKAGE.rglob("*.pxd")) + sorted(PACKAGE.rglob("*.pyx")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _module_names()


def _owning_module(dotted: str) -> str | None:
    """The longest prefix of ``dotted`` that is a module of the package (``a.b.name`` → ``a.b``)."""
    while dotted and dotted not in MODULES:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def _imports_of(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            # ``from pkg import submodule`` imports the submodule, ``from mod import name`` the module.
            targets = [f"{origin}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= _owners(targets, module)
    return found


def _owners(targets, module: str) -> set[str]:
    """The rankopt modules (other than ``module``) that own the imported names ``targets``."""
    owners = {_owning_module(target) for target in targets if target.split(".")[0] == "rankopt"}
    return {owner for owner in owners if owner is not None and owner != module}


#: ``cimport a.b``, ``from a.b cimport x``, ``import a.b``, ``from a.b import x`` in Cython sources.
_CYTHON_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import\s+([\w, ()]+)|c?import\s+([\w.]+))", re.M)


def _cython_imports_of(module: str, path: Path) -> set[str]:
    """The rankopt modules a .pyx/.pxd file imports or cimports (with its .pxd/.pyx sibling)."""
    found = set()
    for source in {path.with_suffix(".pyx"), path.with_suffix(".pxd")}:
        if not source.exists():
            continue
        for origin, names, plain in _CYTHON_IMPORT.findall(source.read_text(encoding="utf-8")):
            targets = [plain] if plain else [f"{origin}.{n.strip(' ()')}" for n in names.split(",")]
            found |= _owners(targets, module)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module → the rankopt modules it imports: .py by ``ast``; .pyx/.pxd by their (c)import lines."""
    return {
        name: _imports_of(name, path) if path.suffix == ".py" else _cython_imports_of(name, path)
        for name, path in MODULES.items()
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_is_read():
    graph = import_graph()
    assert "rankopt.estimators.rank_svm" in graph
    assert "rankopt.engine.solvers" in graph["rankopt.estimators.rank_svm"]
    assert "rankopt.engine.cutting_plane" in graph["rankopt.engine.solvers"]  # function-local
    # function-local and typing-only imports count
    assert "rankopt.plugins" in graph["rankopt.estimators.parameters"]
    assert "rankopt.inference.base" in graph["rankopt.models.base"]


def test_circles_are_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    found = circles(import_graph())
    assert not found, "import circles in rankopt (each line one circle):\n" + "\n".join(" <-> ".join(c) for c in found)


#: Layers that must not import the ones named after them.
LOWER_LAYERS = {
    "rankopt._validation": ("rankopt",),
    "rankopt.exceptions": ("rankopt",),
    # Every plugin layer imports the hook markers from here (issue 48: under TYPE_CHECKING, this module
    # imported losses, features, models and inference back).
    "rankopt.hookspecs": ("rankopt",),
    # Losses sit strictly below inference: they declare what they are, inference runs it.
    "rankopt.losses": (
        "rankopt.inference",
        "rankopt.plugins",
        "rankopt.api",
        "rankopt.estimators",
        "rankopt.engine",
        "rankopt.models",
    ),
    "rankopt.inference": ("rankopt.plugins", "rankopt.api", "rankopt.estimators", "rankopt.engine", "rankopt.models"),
    "rankopt.engine": ("rankopt.plugins", "rankopt.api", "rankopt.estimators", "rankopt.models"),
    "rankopt.models": ("rankopt.plugins", "rankopt.api", "rankopt.estimators"),
    "rankopt.features": ("rankopt.plugins", "rankopt.api", "rankopt.estimators", "rankopt.models"),
    "rankopt.data.backends": ("rankopt.data.dask_backend",),
    # The model file asks its registry, which the estimators fill (issue 48: it named them in importlib strings).
    "rankopt.data.model_file": ("rankopt.estimators",),
}


@pytest.mark.parametrize("layer", sorted(LOWER_LAYERS))
def test_layers_point_one_way(layer):
    forbidden = LOWER_LAYERS[layer]
    bad = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if module == layer or module.startswith(layer + ".")
        for target in targets
        if any(target == f or target.startswith(f + ".") for f in forbidden)
    )
    assert not bad, "\n".join(bad)


def _registered_loss_classes() -> set[str]:
    """The loss classes the built-in plugin modules of rankopt.losses return from their rankopt_losses() hooks."""
    names = set()
    for path in (PACKAGE / "losses").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "rankopt_losses":
                for returned in ast.walk(node):
                    if isinstance(returned, ast.Name) and returned.id[0].isupper():
                        names.add(returned.id)
    return names


def _names_in_code(path: Path) -> set[str]:
    """Every identifier the module's code uses (names, attributes, imports), docstrings and comments aside."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.alias):
            used.add(node.name.rpartition(".")[2])
    return used


#: Where dispatch happens: inference, models, engine, estimators, the hinge and its torch layer.
DISPATCHING = sorted(
    path
    for folder in ("inference", "models", "engine", "estimators")
    for suffix in ("*.py", "*.pyx")
    for path in (PACKAGE / folder).glob(suffix)
) + [PACKAGE / "hinge.py", *sorted((PACKAGE / "torch").glob("*.py"))]
#: Where no concrete loss class is even named: the inference layer, the ranking model, the hinge.
NAMING_NONE = sorted((PACKAGE / "inference").glob("*.py*")) + [
    PACKAGE / "models" / "ranking.py",
    PACKAGE / "hinge.py",
    *sorted((PACKAGE / "torch").glob("*.py")),
]


@pytest.mark.parametrize("path", NAMING_NONE, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_inference_names_no_concrete_loss_class(path):
    """Issue 29, 39: inference, the ranking model and the hinge name no concrete loss class; losses declare
    structure."""
    concrete = _registered_loss_classes()
    assert {"APLoss", "GradedNDCGLoss", "PairwiseLoss"} <= concrete
    if path.suffix == ".py":
        assert not (_names_in_code(path) & concrete)
    else:
        assert not any(re.search(rf"\b{name}\b", path.read_text(encoding="utf-8")) for name in concrete)


@pytest.mark.parametrize("path", DISPATCHING, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_nothing_dispatches_on_a_loss_class(path):
    """Issue 39: no isinstance on a built-in loss class outside losses/ (a model may still build the loss it
    is defined with, as the latent binary SVM builds its class-weighted 0-1 loss)."""
    if path.suffix != ".py":
        return
    hits = _isinstance_targets(ast.parse(path.read_text(encoding="utf-8"))) & _registered_loss_classes()
    assert not hits, hits


STRUCTURE_CLASSES = {"GradedPositionStructure", "GradedPairStructure", "GradedQueryStructure", "TopKCountStructure"}
#: The two modules that may test a structure's class: where structures are defined, and the table.
STRUCTURE_HOMES = {PACKAGE / "losses" / "structure.py", PACKAGE / "inference" / "structure_table.py"}


def _isinstance_targets(tree: ast.AST) -> set[str]:
    """The names given as the class argument of every isinstance/issubclass call, and of ``type(x) is C``."""
    found = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
        ):
            if len(node.args) == 2:
                found |= {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                found |= {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
    return found


def test_no_isinstance_ladder_on_structures_outside_their_table():
    """Issue 39: a declared structure maps to its kernel in one table; nothing else tests its class."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in STRUCTURE_HOMES:
            continue
        hits = _isinstance_targets(ast.parse(path.read_text(encoding="utf-8"))) & STRUCTURE_CLASSES
        offenders += [f"{path.relative_to(PACKAGE)}: {sorted(hits)}"] if hits else []
    assert not offenders, offenders


def _graded_reads(tree: ast.AST) -> set[str]:
    """The expressions whose ``.graded`` the code reads."""
    return {ast.unparse(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "graded"}


#: Where a loss's own ``graded`` declaration is read: the losses, and the table that matches it to a kernel.
GRADED_DECLARATION_HOMES = {PACKAGE / "losses", PACKAGE / "inference" / "structure_table.py"}


def test_consumers_ask_the_kernel_whether_it_reads_grades():
    """Issue 48: outside the losses and the structure table, ``.graded`` is read of a kernel only (``kernel``,
    ``self.kernel``, or a kernel's ``self``); everything else asks ``structure_table.reads_grades``."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if any(path == home or home in path.parents for home in GRADED_DECLARATION_HOMES):
            continue
        in_kernel_module = (
            path.parent.name == "inference" and path.stem.endswith("kernels") or path.stem == "kernel_base"
        )
        allowed = {"kernel", "self.kernel"} | ({"self"} if in_kernel_module else set())
        read = _graded_reads(ast.parse(path.read_text(encoding="utf-8"))) - allowed
        offenders += [f"{path.relative_to(PACKAGE)}: {sorted(read)}"] if read else []
    assert not offenders, offenders


def test_the_graded_reads_are_found():
    assert _graded_reads(ast.parse("x = loss.graded or kernel.graded")) == {"loss", "kernel"}


def test_the_cython_imports_are_read():
    graph = import_graph()
    assert "rankopt.inference._qs" in graph["rankopt.inference._batched"]  # a cimport
    assert "rankopt.inference._qs" in graph["rankopt.inference.qs_check"]


#: A function of a Cython source: ``def``, ``cdef`` or ``cpdef`` at the start of a line, with a parameter list
#: (not a ``cdef struct``, ``enum``, ``class`` or ``extern`` block, nor a module-level ``cdef`` variable).
_CYTHON_FUNCTION = re.compile(r"^(?:c?p?def)\s+(?!(?:struct|enum|class|extern|union|packed|fused)\b)[^=\n]*?(\w+)\s*\(")


def cython_function_sizes() -> dict[str, int]:
    """Lines of every function in rankopt's .pyx and .pxd files: from its ``def`` line to its last non-blank
    indented line (a function ends at the next line that starts at column 0)."""
    sizes = {}
    for path in sorted([*PACKAGE.rglob("*.pyx"), *PACKAGE.rglob("*.pxd")]):
        lines = path.read_text(encoding="utf-8").splitlines()
        for start, line in enumerate(lines):
            match = _CYTHON_FUNCTION.match(line)
            if not match:
                continue
            end = start + 1
            while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t)"):
                end += 1
            while end - 1 > start and not lines[end - 1].strip():
                end -= 1
            sizes[f"{path.relative_to(PACKAGE)}:{match.group(1)}"] = end - start
    return sizes


def test_the_cython_function_sizes_are_read():
    sizes = cython_function_sizes()
    assert len(sizes) > 100
    assert 20 < sizes["inference/_qs.pyx:_distributed_ranks"] <= 80
    assert "inference/_batched.pyx:_binary_query" in sizes


def test_functions_stay_small():
    """Issues 31, 39 and 48: no function of rankopt/ over 80 lines, docstring included, the Cython sources
    too; the two entry points at most 60."""
    sizes = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                sizes[f"{path.relative_to(PACKAGE)}:{node.name}"] = node.end_lineno - node.lineno + 1
    sizes.update(cython_function_sizes())
    assert not {name: n for name, n in sizes.items() if n > 80}
    assert sizes["engine/cutting_plane.py:solve_cutting_plane"] <= 60
    assert sizes["estimators/rank_svm.py:fit"] <= 60


def _public_modules():
    """Every module of the package whose path has no private part (``_x.py``, ``_x/``), ``__init__`` included."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if not any(part.startswith("_") and part != "__init__" for part in parts):
            yield path


def test_every_public_module_says_what_it_exports():
    """Issue 48: 29 public modules had no ``__all__``; each now lists its public names, and each listed name
    is defined (or imported) there."""
    missing, unknown = [], []
    for path in _public_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        exported = [
            node.value
            for node in tree.body
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets)
        ]
        if not exported:
            missing.append(str(path.relative_to(PACKAGE.parent)))
            continue
        lazy = any(isinstance(node, ast.FunctionDef) and node.name == "__getattr__" for node in tree.body)
        if lazy or not isinstance(exported[0], (ast.List, ast.Tuple)):
            continue  # names a module __getattr__ imports on first access: checked by the import tests
        defined = {
            name
            for node in ast.walk(tree)
            for name in (
                [node.name]
                if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                else [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
                + ([node.target.id] if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) else [])
                + [
                    a.asname or a.name.split(".")[0]
                    for a in getattr(node, "names", [])
                    if isinstance(node, (ast.Import, ast.ImportFrom))
                ]
            )
        }
        unknown += [
            f"{path.name}:{e.value}" for e in exported[0].elts if isinstance(e, ast.Constant) and e.value not in defined
        ]
    assert missing == [], missing
    assert unknown == [], unknown


def test_the_experiments_import_no_circle():
    """Issue 48: experiments/deep.py and experiments/learners.py imported each other (the shared result types
    now live in experiments/results.py).  Every import counts, inside functions too."""
    root = PACKAGE.parent / "experiments"
    graph: dict[str, set[str]] = {}
    for path in sorted(root.glob("*.py")):
        name = path.stem
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("experiments"):
                target = node.module.split(".")[1] if "." in node.module else None
                targets = [target] if target else [alias.name for alias in node.names]
                graph[name].update(t for t in targets if (root / f"{t}.py").exists() and t != name)
            elif isinstance(node, ast.Import):
                graph[name].update(
                    a.name.split(".")[1]
                    for a in node.names
                    if a.name.startswith("experiments.") and a.name.count(".") == 1
                )

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(
            nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})) for nxt in graph.get(start, ())
        )

    circles = sorted(name for name in graph if reaches(name, name, {name}))
    assert circles == [], circles


#: The front doors of the learners: thin over the one pipeline (issue 48).
ADAPTERS = [
    *sorted((PACKAGE / "torch").glob("*.py")),
    PACKAGE / "pml.py",
    PACKAGE / "boosting.py",
    PACKAGE / "lightgbm.py",
    PACKAGE / "xgboost.py",
]


@pytest.mark.parametrize("path", ADAPTERS, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_each_adapter_module_stays_within_250_lines(path):
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 250


def test_the_torch_modules_hold_no_validation_and_no_reduction_of_their_own():
    """Issue 48: RankHingeLoss and MetricHingeLoss store their hyperparameters and call the functional; what
    they check and how they reduce is written once, below them."""
    tree = ast.parse((PACKAGE / "torch" / "modules.py").read_text(encoding="utf-8"))
    raises = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Raise)]
    reductions = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in {"sum", "mean", "clamp", "reduce_hinges"}
    ]
    assert not raises and not reductions, (raises, reductions)
