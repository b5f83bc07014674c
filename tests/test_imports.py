"""The package's shape: imports point one way, and what needs no torch does not load it."""

import ast
import subprocess
import sys

import pytest

from .conftest import ROOT

PACKAGE = ROOT / "grammar_induce"
API = {"api"}  # the Python API: over the workflows, under the command line
WORKFLOWS = {"train", "parse", "scoring", "distillation"}
STANDALONE = {"trees", "metrics", "config", "files"}  # import nothing else from the package but files' errors
CORE = {"model", "data", "trees", "metrics", "config", "files", "formats", "treebank", "checkpoint", "native",
        "reference", "recurrence", "distributed", "precision", "rundir", "ensemble", "distances", "pretrained", "corpus",
        "voting", "structs", "student"}
# none of the core draws pictures


def package_imports(module: str) -> set[str]:
    """Every module of the package that `module` imports, at the top or inside a function."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module} if node.module else {alias.name for alias in node.names}
    return {name.split(".")[0] for name in found}


MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))


@pytest.mark.parametrize("module", MODULES)
def test_imports_point_from_cli_to_the_api_to_workflows_to_core(module):
    imported = package_imports(module)
    assert "cli" not in imported, f"{module} imports the command line"
    if module not in API | {"cli"}:
        assert not imported & API, f"{module} imports the API"
    if module in WORKFLOWS:
        assert not imported & WORKFLOWS, f"workflow {module} imports the workflow(s) {imported & WORKFLOWS}"
    elif module not in API | {"cli"}:
        assert not imported & WORKFLOWS, f"core module {module} imports a workflow"
    if module in STANDALONE:
        assert imported <= {"files"} - {module}, f"{module} imports {imported}"
    assert "integrations" not in imported, f"{module} imports the glue for other libraries"
    if module in CORE:
        assert "draw" not in imported, f"core module {module} imports draw"


def test_the_integrations_use_the_api_and_nothing_imports_them():
    for path in (PACKAGE / "integrations").glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 2
                    for alias in node.names}
        assert imported <= {"api", "pretrained", "trees"}, f"{path.name} imports {imported}"


def test_the_lists_above_name_real_modules():
    assert API | WORKFLOWS | STANDALONE | CORE <= set(MODULES) and "cli" in MODULES
    assert set(MODULES) - API - WORKFLOWS - CORE == {"cli", "draw"}  # every module has its place


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
        "print('torch' in sys.modules, 'grammar_induce.model' in sys.modules)\n")
    assert "100.0" in out  # the predicted tree is the gold tree
    assert out.strip().splitlines()[-1] == "False False"
