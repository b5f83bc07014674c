"""The README's Python examples run as written (doctests), from a folder of their own."""

import doctest
import re

from .conftest import ROOT

BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def test_the_readmes_doctests_pass(tmp_path, monkeypatch):
    blocks = [b for b in BLOCK.findall((ROOT / "README.md").read_text()) if ">>>" in b]
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)  # the examples write a small gold file
    globs: dict = {}
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for k, block in enumerate(blocks):
        runner.run(doctest.DocTestParser().get_doctest(block, globs, f"README python block {k + 1}", "README.md", 0),
                   clear_globs=False)
    assert runner.failures == 0, f"{runner.failures} README example(s) failed (see the output above)"


def test_ci_runs_the_quick_start_where_nothing_is_beside_it():
    """CI used to fail wherever its temp folder's parent held a `shared` folder ([ ! -e ../shared ]); it now runs the
    quick start in a new folder inside a new folder, so that reading ../shared would fail, whatever the machine."""
    script = (ROOT / ".ci" / "run").read_text()
    assert "-e ../shared" not in script
    assert 'elsewhere=$(mktemp -d)/quickstart\nmkdir "$elsewhere"\ncd "$elsewhere"' in script
