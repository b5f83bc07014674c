"""The package's shape: folders are layers, imports point down, and what needs no torch does not load it.

From the top: the way in (cli, api), workflows, inference and training (side by side), families (each model family in
a folder of its own) and output (side by side), text and structures (side by side), runtime,
and the core (trees, metrics, files, config, errors, messages). A module imports its own folder and the layers
below it, never above or beside; no workflow imports another; no module imports itself round a cycle (type checking's
imports too); the core imports only `errors`; nothing imports the
integrations.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

PACKAGE = ROOT / "grammar_induce"
CORE = {"trees", "metrics", "files", "config", "errors", "messages"}
RANKS = {"core": 0, "runtime": 1, "text": 2, "structures": 2, "families": 3, "output": 3, "inference": 4, "training": 4,
         "workflows": 5,
         "way in": 6}
WAY_IN = {"api", "cli", "__init__", "__main__"}


def place(module: str) -> str:
    """The layer of a module given as its dotted path inside the package ("workflows.train", "trees")."""
    top = module.split(".")[0]
    if top in WAY_IN:
        return "way in"
    if top in CORE:
        return "core"
    return top


def package_imports(path: Path, text: str | None = None) -> set[str]:
    """The package's modules (dotted, inside the package) that the file (or `text` as that file) imports, at
    the top or in a function."""
    here = path.relative_to(PACKAGE).with_suffix("").parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = [*here[: len(here) - node.level + 1], *([node.module] if node.module else [])]
            for alias in node.names:  # a module imported by name (`from ..workflows import parse`), else its package
                module = [*base, alias.name]
                found.add(".".join(module if PACKAGE.joinpath(*module).with_suffix(".py").exists() else base))
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


def name_of(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts)


@pytest.mark.parametrize("path", MODULES, ids=name_of)
def test_imports_point_down_the_layers(path):
    module = name_of(path)
    if module.startswith("integrations"):
        return  # the glue: its own test below
    layer = place(module)
    for imported in package_imports(path):
        other = place(imported)
        assert other != "integrations", f"{module} imports the glue for other libraries ({imported})"
        if layer == "core":
            assert imported == "errors" and module != "errors", f"core module {module} imports {imported}"
        elif other == layer:
            assert layer != "workflows", f"workflow {module} imports the workflow {imported}"
        else:
            assert RANKS[other] < RANKS[layer], f"{module} ({layer}) imports {imported} ({other}), a layer not below it"
    if module.startswith("families.") and module.count(".") == 2:  # inside one family's folder
        own = module.split(".")[1]
        for imported in package_imports(path):
            parts = imported.split(".")
            assert not (parts[0] == "families" and len(parts) == 3 and parts[1] != own), (
                f"{module} imports {imported}: one family does not import another")
    if module not in ("cli", "__main__"):
        assert "cli" not in package_imports(path), f"{module} imports the command line"


def import_graph() -> dict[str, set[str]]:
    """Each module's imports of the package's modules (a package as its __init__), type checking's too."""
    names = {name_of(path) for path in MODULES}

    def module(name: str) -> str:
        return name if name in names else f"{name}.__init__"

    return {name_of(path): {module(m) for m in package_imports(path)} & names - {name_of(path)} for path in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's cycles: each strongly connected set of two or more modules (Tarjan)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        order[v] = low[v] = len(order)
        stack.append(v)
        for w in graph[v]:
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            part = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in order:
            visit(v)
    return found


def test_no_module_imports_itself_round_a_cycle():
    assert cycles(import_graph()) == []


def test_cycles_finds_a_cycle_and_only_that():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_integrations_use_the_api_and_nothing_imports_them():
    for path in (PACKAGE / "integrations").glob("*.py"):
        imported = {name.split(".")[-1] for name in package_imports(path)} - {"integrations"}
        assert imported <= {"api", "pretrained", "trees"}, f"{path.name} imports {imported}"


def test_every_folder_is_a_layer():
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(RANKS) - {"core", "way in"} | {"integrations"}
    flat = {p.stem for p in PACKAGE.glob("*.py")}
    assert flat == CORE | WAY_IN


def test_the_rule_reads_imports_up_and_across():
    """The test above would see a model importing a workflow, or one workflow importing another."""
    assert place("workflows.train") == "workflows" and place("trees") == "core" and place("api") == "way in"
    assert RANKS[place("inference.ensemble")] > RANKS[place("families.onlstm.model")] > RANKS[place("text.tokenizer")]
    fake = PACKAGE / "families" / "x.py"
    assert package_imports(fake, "from ..workflows import train\nfrom .registry import KINDS\n") == {
        "workflows.train", "families.registry"}


def run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.slow
def test_help_and_scoring_a_file_of_trees_load_no_torch(tmp_path):
    gold = tmp_path / "gold.txt"
    gold.write_text("(S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat))))\n")
    pred = tmp_path / "pred.txt"
    pred.write_text("((the dog) (saw (a cat)))\n")
    out = run_python(
        "import sys\n"
        "from grammar_induce.cli import main\n"
        "for args in (['--help'], ['parse', '--help'], "
        f"['evaluate', '--pred', {str(pred)!r}, '--gold', {str(gold)!r}]):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit as e:\n"
        "        assert not e.code, e.code\n"
        "print('torch' in sys.modules, 'grammar_induce.families.onlstm.model' in sys.modules)\n")
    assert "100.0" in out  # the predicted tree is the gold tree
    assert out.strip().splitlines()[-1] == "False False"
