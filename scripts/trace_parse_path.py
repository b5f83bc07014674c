"""The package modules a parse passes through, as it runs: from `Parser.run` to the last result of one sentence,
each module entered (a call of a function, or an import, in one of the package's modules) and how many times the
path came back to a module it had left. A measure of how straight the parse path is (README: the import rules).

    python scripts/trace_parse_path.py ptb ptb-pcfg en
"""

import sys

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


if __name__ == "__main__":
    for name in sys.argv[1:] or ["ptb"]:
        order = modules_entered(name)
        modules = list(dict.fromkeys(order))
        print(f"{name}: {len(modules)} modules, {len(order) - len(modules)} returns to one left: "
              + " ".join(m.removeprefix("grammar_induce.") for m in modules))
