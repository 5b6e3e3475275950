"""The package's import rule (stated at the top of ``fairseq_ext/__init__.py``), read from the code.

* registered packages (``models``, ``criterions``, ``tasks``, ``generators``, ``optim``) import only
  ``modules``, ``data``, the compat layer and their own package -- except that a task or a generator
  may use a model's public interface, and a task builds its generator (fairseq's ``build_generator``
  hook);
* ``modules`` and ``data`` import neither a registered package nor the offline ``tools``;
* nothing imports a private (``_x``) name of another module (the compat layer aside).

Every ``from fairseq_ext... import`` and ``import fairseq_ext...`` counts, also those inside functions.
"""
import ast
import re
import shutil
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fairseq_ext"
REGISTERED = ("models", "criterions", "tasks", "generators", "optim")
SHARED = ("modules", "data")
ALWAYS_ALLOWED = ("modules", "data", "_compat", "_registry")
MAY_USE_MODELS = ("tasks", "generators")


def imports(path: Path, package_root: Path):
    """``(line, imported module, names)`` of every import of the package in ``path``."""
    parts = path.relative_to(package_root.parent).with_suffix("").parts
    pkg = package_root.name
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            src = node.module or ""
            if node.level:
                base = list(parts[: -node.level])
                src = ".".join(base + ([src] if src else []))
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == pkg or a.name.startswith(pkg + "."):
                    yield node.lineno, a.name, []
            continue
        else:
            continue
        if src == pkg or src.startswith(pkg + "."):
            yield node.lineno, src, names


def violations(package_root: Path = PACKAGE):
    pkg, bad = package_root.name, []
    for f in sorted(package_root.rglob("*.py")):
        rel = f.relative_to(package_root).with_suffix("").parts
        layer = rel[0] if len(rel) > 1 else ""
        module = ".".join((pkg,) + rel)
        for line, src, names in imports(f, package_root):
            target = src.split(".")[1] if "." in src else ""
            where = f"{f.relative_to(package_root.parent)}:{line}"
            if layer in REGISTERED:
                ok = (target in ALWAYS_ALLOWED or target == layer
                      or (target == "models" and layer in MAY_USE_MODELS)
                      or (target == "generators" and layer == "tasks"))
                if not ok:
                    bad.append(f"{where}: {layer}/ imports {src}")
            elif layer in SHARED and target not in ALWAYS_ALLOWED:
                bad.append(f"{where}: {layer}/ imports {src}")
            if src == pkg and layer in REGISTERED + SHARED:
                for n in names:  # `from fairseq_ext import tools` and friends
                    if n not in ALWAYS_ALLOWED and n != layer:
                        bad.append(f"{where}: {layer}/ imports {pkg}.{n}")
            if src != module and not src.endswith("_compat"):
                for n in names:
                    submodule = (package_root.joinpath(*src.split(".")[1:], n + ".py")).exists()
                    if n.startswith("_") and not n.startswith("__") and not submodule:
                        bad.append(f"{where}: private name {n} taken from {src}")
    return bad


def test_the_package_follows_the_import_rule():
    assert violations() == []


@pytest.mark.parametrize("file,line,expected", [
    ("models/twt.py", "from fairseq_ext.criterions.masked_label_smoothed_cross_entropy import mask_logits",
     "models/ imports fairseq_ext.criterions"),
    ("criterions/nat_fertility_label_smoothed_cross_entropy.py", "from fairseq_ext.generators.nat_fertility import NATFertilityGenerator",
     "criterions/ imports fairseq_ext.generators"),
    ("models/lexical.py", "from fairseq_ext.tools.common import read_lines",
     "models/ imports fairseq_ext.tools"),
    ("modules/norms.py", "from fairseq_ext.models.twt import TwtDecoder",
     "modules/ imports fairseq_ext.models"),
    ("data/batching.py", "from fairseq_ext import tools",
     "data/ imports fairseq_ext.tools"),
    ("models/lexical.py", "from fairseq_ext.models.twt import _private_helper",
     "private name _private_helper"),
])
def test_the_rule_catches_a_forbidden_import(tmp_path, file, line, expected):
    """Add one forbidden import to a copy of the package: the check names it."""
    root = tmp_path / "fairseq_ext"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    target = root / file
    target.write_text(target.read_text() + "\n\ndef _added():\n    " + line + "\n")
    found = violations(root)
    assert any(expected in v and file in v for v in found), found


def test_a_task_may_use_a_models_public_interface(tmp_path):
    root = tmp_path / "fairseq_ext"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    target = root / "tasks" / "translation_ext.py"
    target.write_text(target.read_text() + "\nfrom fairseq_ext.models.twt import TwtDecoder  # noqa\n")
    assert violations(root) == violations()


# ------------------------------------------------------------------------------------------------ no import cycle
def module_graph(package_root: Path = PACKAGE) -> dict:
    """``{module: {modules it imports}}`` over the package's own modules (a package is its ``__init__``);
    ``from a import b`` counts as an import of the submodule ``a.b`` when there is one, else of ``a``."""
    pkg = package_root.name
    files = {}
    for f in sorted(package_root.rglob("*.py")):
        parts = (pkg,) + f.relative_to(package_root).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    graph = {}
    for name, f in files.items():
        targets = set()
        for _, src, names in imports(f, package_root):
            subs = [f"{src}.{n}" for n in names if f"{src}.{n}" in files]
            targets.update(subs or ([src] if src in files else []))
            if len(subs) < len(names) and src in files:
                targets.add(src)
        targets.discard(name)
        graph[name] = targets
    return graph


def cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_among_the_package_modules():
    """Imports go one way: a shared piece lives in the module both need, or in a third one."""
    assert cycles(module_graph()) == []


def test_the_cycle_check_finds_a_cycle(tmp_path):
    root = tmp_path / "fairseq_ext"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    target = root / "tools" / "evaluation" / "bleu.py"
    target.write_text(target.read_text() + "\n\ndef _added():\n    from fairseq_ext.tools.evaluation import score\n")
    assert any({"fairseq_ext.tools.evaluation.bleu", "fairseq_ext.tools.evaluation.score"} <= set(c)
               for c in cycles(module_graph(root)))


# --------------------------------------------------------------------------------------- the tools' sub-packages
TOOLS = PACKAGE / "tools"
TOOL_PACKAGES = ("corpora", "evaluation", "analysis", "tm", "export", "chapters")
TOOLS_SHARED = ("common", "hypotheses", "plots")
# which tools sub-packages each one may import (besides itself and TOOLS_SHARED), as tools/__init__.py states
TOOLS_MAY_USE = {"corpora": (), "tm": (), "evaluation": ("corpora",), "export": ("corpora",),
                 "analysis": ("corpora", "evaluation", "tm"),
                 "chapters": ("corpora", "evaluation", "analysis", "tm", "export")}


def table_names(init: Path) -> set:
    """The ````name```` cells of the first column of the table in ``init``'s docstring."""
    lines = (ast.get_docstring(ast.parse(init.read_text())) or "").splitlines()
    borders = [i for i, ln in enumerate(lines) if ln.startswith("====")]
    return {ln.split("``")[1] for ln in lines[borders[0]:borders[-1]] if ln.startswith("``")}


def test_every_tools_module_is_in_its_table():
    top = {p.stem for p in TOOLS.glob("*.py") if p.stem != "__init__"}
    packages = {p.parent.name for p in TOOLS.glob("*/__init__.py")}
    assert top == set(TOOLS_SHARED) and packages == set(TOOL_PACKAGES)
    assert table_names(TOOLS / "__init__.py") == top | packages
    for pkg in TOOL_PACKAGES:
        modules = {p.stem for p in (TOOLS / pkg).glob("*.py") if p.stem != "__init__"}
        assert table_names(TOOLS / pkg / "__init__.py") == modules, pkg
        assert not list((TOOLS / pkg).glob("*/__init__.py")), f"{pkg}: one level of sub-packages"


def test_the_tools_packages_import_one_way():
    bad = []
    for name, targets in module_graph().items():
        parts = name.split(".")
        if len(parts) < 4 or parts[1] != "tools":
            continue
        for t in targets:
            tp = t.split(".")
            if len(tp) >= 3 and tp[1] == "tools" and tp[2] in TOOL_PACKAGES and tp[2] != parts[2] \
                    and tp[2] not in TOOLS_MAY_USE[parts[2]]:
                bad.append(f"{name} imports {t}")
    assert bad == []


def test_module_docstrings_are_short_and_cite_the_thesis():
    """A module docstring says what the module does and which equations/tables of the thesis it implements:
    at most 40 lines, and no reference a reader of the repository cannot open (issues, specs, sessions)."""
    import re

    cites = re.compile(r"issue \d|spec \d|session \d", re.I)
    long, bad = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False) or ""
        name = str(path.relative_to(PACKAGE.parent))
        if len(doc.splitlines()) > 40:
            long.append(f"{name}: {len(doc.splitlines())} lines")
        if cites.search(doc):
            bad.append(f"{name}: {cites.search(doc).group(0)!r}")
    assert long == [] and bad == []


def test_the_bench_configurations_live_in_the_package():
    """The benchmark's configuration table is ``fairseq_ext.tools.evaluation.bench_configs``, imported as a module:
    no file under ``recipes/`` or ``tests/`` loads a ``configs.py`` by its path."""
    import re

    root = PACKAGE.parent
    assert not (root / "recipes" / "bench" / "configs.py").exists()
    assert (PACKAGE / "tools" / "evaluation" / "bench_configs.py").exists()
    by_path = re.compile(r"""["']configs\.py["']|bench/configs\.py""")
    bad = [str(p.relative_to(root)) for d in ("recipes", "tests") for p in sorted((root / d).rglob("*"))
           if p.suffix in (".py", ".sh") and p.name != "test_layout.py" and by_path.search(p.read_text(encoding="utf-8"))]
    assert bad == []


# ------------------------------------------------------------------------------- no script loaded by its path
# importing a file by its path: what two places need lives in the package instead
BY_PATH = re.compile(r"spec_from_file_location|\brunpy\b|sys\.path\.(?:insert|append)\(")
# (file, why it may): the only loads by path left
LOADS_BY_PATH_ALLOWED = {
    "tests/test_simultaneous_cli.py": "a second instance of a package module (simuleval_agent) on a stub simuleval",
    "tests/test_layout.py": "this check",
}


def loads_by_path(root: Path) -> list:
    """``FILE:LINE`` of every Python file under ``root``'s fairseq_ext/, recipes/, examples/ and tests/ that imports
    a file by its path (importlib's ``spec_from_file_location``, ``runpy``, ``sys.path.insert``/``append``), the
    allowed ones (:data:`LOADS_BY_PATH_ALLOWED`) aside."""
    bad = []
    for d in ("fairseq_ext", "recipes", "examples", "tests"):
        for p in sorted((root / d).rglob("*.py")):
            rel = p.relative_to(root).as_posix()
            if rel in LOADS_BY_PATH_ALLOWED:
                continue
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
                if BY_PATH.search(line):
                    bad.append(f"{rel}:{i}")
    return bad


def test_no_recipe_or_example_is_loaded_by_its_path():
    """Nothing in recipes/ or examples/ is imported by another file or by a test through a path hack: a recipe or
    an example is a thin command line over a package module, which the others and the tests import."""
    from fairseq_ext.tools.evaluation import runs

    assert loads_by_path(PACKAGE.parent) == []
    assert not hasattr(runs, "load_script")


def test_the_path_load_check_finds_one(tmp_path):
    for d in ("fairseq_ext", "recipes", "examples", "tests"):
        (tmp_path / d).mkdir()
    (tmp_path / "recipes" / "a.py").write_text("import runpy\nrunpy.run_path('recipes/b.py')\n")
    (tmp_path / "tests" / "test_x.py").write_text(
        "import importlib.util\nspec = importlib.util.spec_from_file_location('b', 'recipes/b.py')\n")
    (tmp_path / "examples" / "c.py").write_text("import sys\nsys.path.insert(0, 'recipes')\n")
    assert loads_by_path(tmp_path) == ["recipes/a.py:1", "recipes/a.py:2", "examples/c.py:2", "tests/test_x.py:2"]
