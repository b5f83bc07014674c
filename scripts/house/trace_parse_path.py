"""The package modules a parse passes through, as it runs: from `Parser.run` to the last result of one sentence,
each module entered (a call of a function, or an import, in one of the package's modules) and how many times the
path came back to a module it had left. A measure of how straight the parse path is (README: the import rules).
With --loaded, how many of the package's modules one concrete `evaluate --pred`, `evaluate --model` and `train` (a
plain one and a focused one, a step each) load, each in a fresh process (issue 82's run-time counts), and whether the
head rules were loaded.

    python scripts/house/trace_parse_path.py ptb ptb-pcfg en
    python scripts/house/trace_parse_path.py --loaded
"""

import subprocess
import sys
import tempfile
from pathlib import Path

import grammar_induce as gi

SENTENCE = "the old man saw a dog"


def modules_entered(name: str) -> list[str]:
    """The package modules the parse of SENTENCE by the shipped model `name` enters, in order, a module once a stay."""
    parser = gi.load(name)
    order: list[str] = []

    def profile(frame, event, arg) -> None:
        module = frame.f_globals.get("__name__", "")
        if event == "call" and module.startswith("grammar_induce") and (not order or order[-1] != module):
            order.append(module)

    sys.setprofile(profile)
    try:
        results, _ = parser.run([SENTENCE], all_layers=False)
        list(results)
    finally:
        sys.setprofile(None)
    return order


ROOT = Path(__file__).resolve().parents[2]
GOLD = ROOT / "grammar_induce" / "resources" / "synthetic" / "test.trees"
LOADED = """
import sys
from grammar_induce.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    own = sorted(m for m in sys.modules if m.startswith("grammar_induce"))
    print("LOADED", len(own), int("grammar_induce.text.heads" in own), file=sys.stderr)
"""


def loaded_by(args: list[str]) -> tuple[int, bool]:
    """How many package modules a command loads in a fresh process, and whether the head rules were among them."""
    run = subprocess.run([sys.executable, "-c", LOADED, *args], check=False, capture_output=True, text=True, cwd=ROOT)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(args[:3])} ...: exit {run.returncode}\n{run.stderr[-2000:]}")
    line = next(line for line in run.stderr.splitlines() if line.startswith("LOADED"))
    _, count, heads = line.split()
    return int(count), heads == "1"


def loaded_counts() -> None:
    with tempfile.TemporaryDirectory() as folder:
        pred = Path(folder) / "pred.txt"
        subprocess.run([sys.executable, "-m", "grammar_induce", "parse", "--model", "en", "--input",
                        str(GOLD.with_suffix(".txt")), "--output", str(pred)], check=True, cwd=ROOT)
        cases = {
            "evaluate --pred": ["evaluate", "--pred", str(pred), "--gold", str(GOLD), "--quiet"],
            "evaluate --model en": ["evaluate", "--model", "en", "--gold", str(GOLD), "--quiet"],
            "train (quick start, one step)": ["train", "--max-steps", "1", "--quiet", "--out", f"{folder}/plain"],
            "train --focus (one step)": ["train", "--config", "configs/pcfg-ptb.toml", "--set", "model.nonterminals=4",
                                         "--set", "model.preterminals=4", "--set", "model.rank=4",
                                         "--train", str(ROOT / "data" / "synthetic" / "valid.txt"),
                                         "--valid", str(ROOT / "data" / "synthetic" / "test.txt"), "--focus", "en",
                                         "--max-steps", "1", "--quiet", "--out", f"{folder}/focused"],
        }
        for name, args in cases.items():
            count, heads = loaded_by(args)
            print(f"{name}: {count} package modules loaded{', the head rules among them' if heads else ''}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--loaded"]:
        loaded_counts()
        sys.exit()
    for name in sys.argv[1:] or ["ptb"]:
        order = modules_entered(name)
        modules = list(dict.fromkeys(order))
        print(f"{name}: {len(modules)} modules, {len(order) - len(modules)} returns to one left: "
              + " ".join(m.removeprefix("grammar_induce.") for m in modules))
