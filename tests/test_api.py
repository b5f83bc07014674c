"""The Python API: the same trees and numbers as the command line, as objects."""

import json

import nltk
import pytest
import torch
from click.testing import CliRunner

import grammar_induce as gi
from grammar_induce import trees
from grammar_induce.api import to_nltk
from grammar_induce.cli import QUICKSTART_GOLD, main
from grammar_induce.errors import InputError, SettingError
from grammar_induce.families import checkpoint, pretrained
from grammar_induce.text.treebank import TagFilter, read_gold
from grammar_induce.trees import from_nested, leaves, parse_brackets, to_brackets

from .conftest import (
    ROOT,
    SYNTHETIC_GOLD,
)
from .test_imports import run_python

SENTENCES = ["the dog saw a cat", "", "he liked the old farmer 's red car", "mary"]


def brackets_of(tree) -> str:
    """An nltk.Tree as bracket text, its labels and unary nodes dropped."""
    return to_brackets(from_nested(tree))


def cli(*args, input=None):
    result = CliRunner().invoke(main, [str(a) for a in args], input=input)
    assert result.exit_code == 0, result.output
    return result.output


def test_parse_gives_nltk_trees_of_the_words_as_written(tiny_run):
    parser = gi.load(tiny_run / "best.pt")
    tree = parser.parse("The dog saw a Zebra")
    assert isinstance(tree, nltk.Tree) and tree.label() == "X"
    assert tree.leaves() == ["The", "dog", "saw", "a", "Zebra"]
    assert all(node.label() == "X" for node in tree.subtrees())
    assert parser.parse("   ") is None
    assert to_nltk("mary") == nltk.Tree("X", ["mary"])


def test_parse_many_streams_in_order_the_trees_the_command_line_prints(tiny_run):
    parser = gi.load(tiny_run / "best.pt")
    trees = list(parser.parse_many(iter(SENTENCES), batch_size=2))
    printed = cli("parse", "--model", tiny_run / "best.pt", "--input", "-", input="\n".join(SENTENCES) + "\n")
    expected = printed.split("\n")[: len(SENTENCES)]
    assert [brackets_of(t) if t is not None else "" for t in trees] == expected
    assert trees[1] is None and trees[3] == nltk.Tree("X", ["mary"])


def test_analyse_is_a_line_of_jsonl(tiny_run, tiny_backward_run):
    paths = [tiny_run / "best.pt", tiny_backward_run / "best.pt"]
    for models in ([paths[0]], paths):
        result = gi.load(*models, decoder="gap").analyse("the dog saw a cat")
        printed = cli("parse", *[a for p in models for a in ("--model", p)], "--decoder", "gap", "--format", "jsonl",
                      "the dog saw a cat")
        assert result.to_dict() == json.loads(printed)
        assert [len(m.gaps) for m in result.members] == [4] * len(models)
        assert [m.layer for m in result.members] == [2] * len(models)


def test_an_ensemble_with_options_parses_as_the_command_line(tiny_run, tiny_backward_run):
    paths = [tiny_run / "best.pt", tiny_backward_run / "best.pt"]
    parser = gi.load(*paths, combine="mean", layer=[1, 3])
    printed = cli("parse", "--model", paths[0], "--model", paths[1], "--combine", "mean", "--layer", 1, "--layer", 3,
                  "the dog saw a cat near the river")
    assert brackets_of(parser.parse("the dog saw a cat near the river")) == printed.strip()
    auto = gi.load(*paths, layer="auto")
    assert auto.options.auto_layers and auto.options.layers == ()


def test_evaluate_gives_the_numbers_the_command_line_writes(tiny_run, tmp_path):
    report = gi.evaluate(gi.load(tiny_run / "best.pt"), gold=str(QUICKSTART_GOLD))
    cli("evaluate", "--model", tiny_run / "best.pt", "--quiet", "--json", tmp_path / "e.json",
        "--save-trees", tmp_path / "t.txt")
    assert report.to_dict() == json.loads((tmp_path / "e.json").read_text())
    lines = (tmp_path / "t.txt").read_text().splitlines()
    for predicted in (lines, [to_nltk(parse_brackets(line)) for line in lines]):
        again = gi.evaluate(predicted, gold=str(QUICKSTART_GOLD))
        assert again.rows["predicted"].to_dict() == report.rows[report.main_row].to_dict()


@pytest.mark.parametrize("how", [{}, {"layer": 1, "decoder": "gap"}, {"layer": "auto"}, {"combine": "mean"},
                                 {"layer": "auto", "batch_size": 2}])  # layers chosen on the first 128 of 500
def test_evaluate_scores_the_trees_the_parser_makes(tiny_run, tiny_backward_run, how):

    parser = gi.load(tiny_run / "best.pt", *([tiny_backward_run / "best.pt"] if how else []), **how)
    report = gi.evaluate(parser, gold=QUICKSTART_GOLD)
    words = [g.words for g in read_gold(str(QUICKSTART_GOLD), TagFilter())[0]]
    parsed = [from_nested(tree) for tree in parser.parse_many(words)]
    assert [leaves(t) for t in report.predicted] == words and report.predicted == parsed


def test_evaluate_reads_tree_objects_without_bracket_text(tiny_run, monkeypatch):
    from grammar_induce.text.treebank import TagFilter, read_gold

    words = [g.words for g in read_gold(str(QUICKSTART_GOLD), TagFilter())[0]]
    objects = list(gi.load(tiny_run / "best.pt").parse_many(words))
    from_text = gi.evaluate([brackets_of(tree) for tree in objects], gold=QUICKSTART_GOLD)
    gold_objects = [nltk.Tree.fromstring(line) for line in QUICKSTART_GOLD.read_text().splitlines()]
    monkeypatch.setattr(trees, "parse_brackets", None)  # a round trip through text would fail now
    monkeypatch.setattr(trees, "to_brackets", None)
    assert gi.evaluate(objects, gold=QUICKSTART_GOLD).to_dict() == from_text.to_dict()
    assert gi.evaluate(gold_objects, gold=QUICKSTART_GOLD, labeled=True).rows["predicted"].sentence_f1 == 1.0


def test_nltk_trees_with_labels_and_unary_nodes_become_bracket_text():
    tree = nltk.Tree.fromstring("(S (NP (DT the) (NN dog)) (VP (VBD barked)))")
    assert brackets_of(tree) == "((the dog) barked)"


def test_a_path_or_a_name_and_what_is_neither(tmp_path):
    with pytest.raises(InputError, match=r"nope: no such checkpoint file, nor a model name \(models: "):
        pretrained.resolve(["nope"])
    assert pretrained.resolve([]) == pretrained.resolve(["en"])  # no name: the default model
    (tmp_path / "ptb").write_text("")  # a file of that name wins over the shipped model
    spec = pretrained.resolve([str(tmp_path / "ptb")])
    assert spec.paths == (tmp_path / "ptb",) and spec.decoder is None


@pytest.mark.slow
def test_importing_the_package_loads_no_torch_and_loading_a_model_does(tiny_run):
    out = run_python(
        "import sys, os\n"
        "os.environ.pop('THP_MEM_ALLOC_ENABLE', None)  # inherited from this test process\n"
        "import grammar_induce as gi\n"
        "print(gi.__version__, 'torch' in sys.modules, 'THP_MEM_ALLOC_ENABLE' in os.environ, sorted(gi.__all__))\n"
        f"gi.load({str(tiny_run / 'best.pt')!r})\n"
        "print('torch' in sys.modules)\n")
    first, second = out.strip().splitlines()
    assert first.startswith("0.") and " False False " in first and "'load'" in first and second == "True"


def test_bad_arguments_get_errors_a_python_user_can_act_on(tiny_run, tmp_path):
    model = tiny_run / "best.pt"
    parser = gi.load(model)
    with pytest.raises(ValueError, match="decoder must be one of"):
        gi.load(model, decoder="nope")  # a SettingError is a ValueError
    for bad in (None, ""):
        with pytest.raises(ValueError, match="model takes a checkpoint's path or a shipped model's name"):
            gi.load(bad)
    assert len(gi.load([str(model), str(model)]).models) == 2  # a list, as spaCy's config gives it
    with pytest.raises(ValueError, match="pretokenized must be True or False, not 'false'"):
        gi.load(model, pretokenized="false")
    with pytest.raises(ValueError, match="layer takes a number"):
        gi.load(model, layer=True)
    with pytest.raises(ValueError, match="token 1 'a b' is more than one token"):
        list(parser.parse_many([["a b", "c"]]))
    with pytest.raises(ValueError, match="token 1 '' is empty"):
        list(parser.parse_many([["", "c"]]))
    with pytest.raises(TypeError, match="sentence 1: token 2 is int 1, not a str"):
        list(parser.parse_many([["a", 1]]))
    with pytest.raises(TypeError, match="parse_many takes an iterable of sentences, not NoneType"):
        list(parser.parse_many(None))
    for gold in (None, ["a.mrg"]):
        with pytest.raises(ValueError, match="gold takes a gold treebank"):
            gi.evaluate(parser, gold=gold)
    with pytest.raises(TypeError, match="evaluate scores a parser, trees or a file of trees, not int"):
        gi.evaluate(5, gold=str(QUICKSTART_GOLD))
    with pytest.raises(ValueError, match="max_length must be a whole number of at least 0"):
        gi.evaluate(parser, gold=str(QUICKSTART_GOLD), max_length=-1)


def test_train_from_python_is_what_the_command_line_trains(tmp_path):

    tiny = ROOT / "configs" / "tiny.toml"
    settings = {"run.max_steps": 4, "run.device": "cpu"}
    result = gi.train(tiny, tmp_path / "api", settings=settings, overrides=["run.seed=7"], log=None)
    cli("train", "--config", tiny, "--out", tmp_path / "cli", "--max-steps", 4, "--device", "cpu", "--seed", 7,
        "--quiet")
    assert result.out_dir == tmp_path / "api" and result.best_valid_ppl is not None
    a, b = (checkpoint.read(tmp_path / run / "best.pt") for run in ("api", "cli"))
    assert a["config"] == b["config"]
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    with pytest.raises(ValueError, match="settings are keyed section.key"):
        gi.train(tiny, tmp_path / "bad", settings={"epochs": 2})


@pytest.mark.parametrize("setting, value, message", [
    ("layer", 7, "layer 7 is out of range: the model has layers 1 to 3"),
    ("distance", "bogus", (r"distance bogus: ptb-forward.pt \(shipped\) \(an ON-LSTM language model\) has no "
                           r"bogus distances; it has forget, input")),
    ("distance", 3, r"distance names a model's distances \(forget, input, parser\), not 3"),
    ("decoder", "bogus", "decoder must be one of paper, gap"),
    ("combine", "bogus", "combine must be one of mbr, mean"),
    ("batch_size", 0, "batch_size must be a whole number of at least 1"),
    ("precision", "fp64", "precision must be one of fp32, bf16, auto"),
    ("right_voter", float("inf"), "right_voter must be a finite number of at least 0, not inf"),
])
def test_load_refuses_bad_settings_at_once(setting, value, message):
    with pytest.raises(SettingError, match=message):
        gi.load("ptb", **{setting: value})


def test_parse_and_parse_many_refuse_what_is_not_text(ptb):
    for bad in (None, b"a b", ["a", "b"]):
        with pytest.raises(TypeError, match="parse takes a sentence as a str"):
            ptb.parse(bad)
    with pytest.raises(TypeError, match="parse_many takes an iterable of sentences, not one str"):
        list(ptb.parse_many("a string"))
    with pytest.raises(ValueError, match="batch_size must be a whole number of at least 1"):
        list(ptb.parse_many(["a b"], batch_size=-1))
    with pytest.raises(ValueError, match="sentence 2: control character U\\+0000"):
        list(ptb.parse_many(["a b", "c\x00d"]))
    with pytest.raises(TypeError, match="sentence 1: a str, or a list of str tokens, not int"):
        list(ptb.parse_many([3]))
    assert next(ptb.parse_many([["The", "dog", "barked", "."]])).leaves() == ["The", "dog", "barked", "."]


def test_evaluate_takes_str_and_path_and_explains_none(tmp_path):
    gold_trees = [line for line in SYNTHETIC_GOLD.read_text().splitlines() if line.strip()]
    pred = tmp_path / "pred.txt"
    pred.write_text("\n".join(gold_trees) + "\n")
    for predicted, gold in ((str(pred), str(SYNTHETIC_GOLD)), (pred, SYNTHETIC_GOLD)):
        report = gi.evaluate(predicted, gold=gold)
        assert report.rows[report.main_row].sentence_f1 == 1.0
    with pytest.raises(TypeError, match="tree 2 is None"):
        gi.evaluate([gold_trees[0], None] + gold_trees[2:], gold=SYNTHETIC_GOLD)


def test_parse_many_of_a_generator_reads_a_batch_before_its_first_tree(ptb):
    read = []

    def lines():
        for k in range(200):
            read.append(k)
            yield "the dog barked"

    assert next(ptb.parse_many(lines(), batch_size=8)).leaves() == ["the", "dog", "barked"]
    assert len(read) <= 9  # a batch, and the one line that shows it is full
