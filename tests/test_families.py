"""A family is its model module's `FAMILY` and one registry entry. A toy family, defined in this file alone, that
yields right-branching trees runs through loading, parse, evaluate, ensembles and the API; one whose distances and
dependency heads are its own is parsed, evaluated and rendered by them; a toy family that trains itself (a
`log_likelihood`) goes through train and resume too; nothing outside the registry and the families asks which
family a model is."""

import json
import re
from dataclasses import dataclass
from pathlib import Path

import nltk
import pytest
import torch
from click.testing import CliRunner

import grammar_induce as gi
from grammar_induce import trees
from grammar_induce.cli import QUICKSTART_GOLD, main
from grammar_induce.config import Config, ConfigError, ModelConfig, RunConfig
from grammar_induce.errors import InputError, SettingError
from grammar_induce.families import checkpoint, registry, sentences
from grammar_induce.families.family import Family, Yields
from grammar_induce.families.kind import ModelKind
from grammar_induce.families.reading import Reading
from grammar_induce.inference.voting import most_voted_trees

from .conftest import ROOT

SENTENCE = "the dog saw a cat near the river"


class RightBranching(ModelKind):
    """The toy: every sentence's right-branching tree."""

    def __init__(self, vocab_size: int, config: ModelConfig):  # it reads no key of its own: the base sections
        super().__init__()
        self.embedding = torch.nn.Embedding(vocab_size, 2)  # a weight: the checkpoint has a state and a device

    def read(self, tokens, words, n_layers=None, products=None) -> list[Reading]:
        return [Reading(list(w), parsed_tree=trees.right_branching(w)) for w in words]


@dataclass(frozen=True)
class ToyTrainConfig(sentences.SentenceTrainConfig):
    """The toys' [train]: the whole-sentence recipe's keys, with the batch size, lr and clip a family gives."""

    batch_size: int = 4
    lr: float = 1e-3
    clip: float = 3.0


# it reads no key of its own (the base [model]); a [train] section of some recipe's, as every family has one
RIGHT = Family("toy-right", "a right-branching toy", RightBranching, ModelConfig, ToyTrainConfig,
               Yields(own_trees=True, search="a rule"))


def register(monkeypatch, family: Family) -> None:
    """The one registry line a new family needs, for the test alone."""
    monkeypatch.setitem(registry.FAMILIES, family.name, family)


def saved_toy(monkeypatch, path, family: Family, tiny_model) -> Path:
    """A new model of a toy family (registered for the test alone) saved at `path`, with the tiny model's words."""
    register(monkeypatch, family)
    config = Config(model=ModelConfig(kind=family.name), data=tiny_model.config.data, train=family.train_config(),
                    run=RunConfig())
    checkpoint.save(path, family.build(len(tiny_model.vocab), config.model), tiny_model.vocab, tiny_model.tokenizer,
                    config)
    return path


@pytest.fixture
def toy(monkeypatch, tmp_path, tiny_model):
    """A checkpoint of the right-branching toy."""
    return saved_toy(monkeypatch, tmp_path / "toy.pt", RIGHT, tiny_model)


def brackets(tree: nltk.Tree) -> str:
    return trees.to_brackets(trees.from_nested(tree))


def test_the_kind_is_looked_up_by_the_name_its_checkpoint_stores(toy, monkeypatch):
    assert isinstance(checkpoint.load(toy).model, RightBranching)
    monkeypatch.delitem(registry.FAMILIES, RIGHT.name)
    with pytest.raises(InputError, match=r"toy\.pt: damaged checkpoint \(model\.kind must be one of onlstm, lstm, "
                                         r"student, pcfg, structformer, got 'toy-right'\)"):
        checkpoint.load(toy)


def test_the_api_and_the_command_line_parse_with_it(toy):
    assert brackets(gi.load(toy).parse(SENTENCE)) == "(the (dog (saw (a (cat (near (the river)))))))"
    result = CliRunner().invoke(main, ["parse", "--model", str(toy), "--layer", "2", SENTENCE])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "(the (dog (saw (a (cat (near (the river)))))))"
    assert "note: --layer has no effect with a right-branching toy (a rule" in result.stderr
    assert "its trees come from their own search, not distances" in result.stderr


def test_evaluate_scores_it_as_the_right_branching_baseline(toy):
    report = gi.evaluate(gi.load(toy), gold=QUICKSTART_GOLD)
    assert report.main_row == "toy-right (a rule)"
    assert report.rows["toy-right (a rule)"].to_dict() == report.rows["right-branching"].to_dict()


def test_in_an_ensemble_it_votes_beside_a_language_model(toy, tiny_run):
    words = SENTENCE.split()
    alone = gi.load(tiny_run / "best.pt").parse(SENTENCE)
    pair = gi.load(tiny_run / "best.pt", toy).parse(SENTENCE)
    expected = most_voted_trees([[trees.from_nested(alone), trees.right_branching(words)]])[0]
    assert brackets(pair) == trees.to_brackets(expected)
    with pytest.raises(SettingError, match="mean needs gap scores"):
        gi.load(tiny_run / "best.pt", toy, combine="mean").parse(SENTENCE)
    report = gi.evaluate(gi.load(tiny_run / "best.pt", toy), gold=QUICKSTART_GOLD)
    assert "mbr of 2" in report.rows and "mean of 2" not in report.rows
    assert any(name.startswith("2: ") and name.endswith("toy.pt") for name in report.rows)  # its own trees: no layer


class Positions(ModelKind):
    """A toy whose distances have names of their own, over two layers: `position` (each word's index: the paper's
    split peels the last word off) and `reverse` (the other way); and dependency heads (each word's head the next
    word, the last the root)."""

    parse_layers = 2

    def __init__(self, vocab_size: int, config: ModelConfig):
        super().__init__()
        self.embedding = torch.nn.Embedding(vocab_size, 2)

    def read(self, tokens, words, n_layers=None, products=None) -> list[Reading]:
        return [Reading(list(w), {"position": [[float(k) for k in range(len(w))]] * 2,
                                  "reverse": [[float(len(w) - k) for k in range(len(w))]] * 2},
                        heads=[*range(2, len(w) + 1), 0]) for w in words]


POSITIONS = Family("toy-positions", "a positions toy", Positions, ModelConfig, ToyTrainConfig,
                   Yields(distances=("position", "reverse"), heads=True))


def test_a_family_whose_distances_have_names_of_their_own_parses_evaluates_and_writes_by_them(monkeypatch, tmp_path,
                                                                                               tiny_model):
    """Readings name their distances (issue 71): the toy's are offered by its names, its first by default, in the API,
    parse, jsonl and evaluate's rows; a name it lacks is a one-line error naming it and the names it has. Its
    `Yields.heads` flag is all it takes for its heads to be written as CoNLL (the heads renderer)."""
    path = saved_toy(monkeypatch, tmp_path / "positions.pt", POSITIONS, tiny_model)
    words = SENTENCE.split()
    by_position = trees.to_brackets(trees.decode([float(k) for k in range(8)], words, "forward", "paper"))
    by_reverse = trees.to_brackets(trees.decode([float(8 - k) for k in range(8)], words, "forward", "paper"))
    assert by_position != by_reverse
    assert brackets(gi.load(path).parse(SENTENCE)) == brackets(gi.load(path, distance="position").parse(SENTENCE)) \
        == by_position
    assert brackets(gi.load(path, distance="reverse").parse(SENTENCE)) == by_reverse
    result = CliRunner().invoke(main, ["parse", "--model", str(path), "--distance", "reverse", "--format", "jsonl",
                                       SENTENCE])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)
    assert record["position"][1] == [float(k) for k in range(8)] and record["reverse"][1] == [float(8 - k) for k in range(8)]
    assert trees.to_brackets(record["tree"]) == by_reverse
    wrong = CliRunner().invoke(main, ["parse", "--model", str(path), "--distance", "forget", SENTENCE])
    assert wrong.exit_code != 0 and wrong.output.strip().splitlines()[-1] == (
        f"Error: --distance forget: {path} (a positions toy) has no forget distances; it has position, reverse")
    report = gi.evaluate(gi.load(path, distance="reverse"), gold=QUICKSTART_GOLD)
    assert report.main_row == "layer 1 reverse"
    assert {"layer 1 position", "layer 2 reverse", "mean of layers position"} <= set(report.rows)
    conll = CliRunner().invoke(main, ["parse", "--model", str(path), "--format", "conll", SENTENCE])
    assert conll.exit_code == 0, conll.output
    rows = [line.split("\t") for line in conll.stdout.splitlines() if line and not line.startswith("#")]
    assert [(row[1], row[6]) for row in rows] == [(w, str(k + 2) if k < 7 else "0") for k, w in enumerate(words)]


def test_nothing_outside_the_registry_and_the_families_asks_which_family_a_model_is():
    package = ROOT / "grammar_induce"
    asking = re.compile(r"is_student|has_distances|YIELDS|\.NAME\s*[!=]=|[!=]=\s*\w+\.NAME\b|model\.kind\s*[!=]=|"
                        r"(family|STUDENT)\.name\s*[!=]=|[!=]=\s*\w*(family|STUDENT)\.name\b|"
                        r"kind\s*[!=]=\s*\"(onlstm|lstm|student|pcfg|structformer)\"|"
                        r"(isinstance|issubclass)\([^)]*(SpanParser|LanguageModel)")
    families = package / "families"
    found = [f"{path.relative_to(package)}:{k}" for path in package.rglob("*.py")
             if not (path.parent.parent == families or path in (families / "registry.py", families / "family.py"))
             for k, line in enumerate(path.read_text().splitlines(), 1) if asking.search(line)]
    assert found == []


@dataclass(frozen=True)
class WidthConfig(ModelConfig):
    """The toy family's own [model] key: how many span widths get a score of their own."""

    widths: int = 64


TOY_CONFIG = """
[model]
kind = "toy-width"
widths = 32

[data]
train = "{root}/data/synthetic/valid.txt"
valid = "{root}/data/synthetic/test.txt"

[train]
lr = 0.05
max_length = 12

[run]
epochs = 2
device = "cpu"
"""


class WidthCRF(ModelKind):
    """A toy family that trains itself: a unigram model of the words times a tree CRF whose span scores are one
    learned number per span width; `train` fits its `log_likelihood` by the whole-sentence recipe, `read` gives
    its CKY trees. Its config: its own [model] section, the whole-sentence recipe's [train]."""

    def __init__(self, vocab_size: int, config: WidthConfig):
        super().__init__()
        self.unigram = torch.nn.Parameter(torch.zeros(vocab_size))
        self.width = torch.nn.Parameter(torch.zeros(config.widths))

    def span_scores(self, n: int) -> torch.Tensor:
        i, j = torch.arange(n + 1).view(-1, 1), torch.arange(n + 1).view(1, -1)
        return self.width[(j - i).clamp(0, len(self.width) - 1)]

    def log_likelihood(self, words, lengths, products=None):
        from grammar_induce.structures import tree_crf

        emitted = self.unigram.log_softmax(0)[words]
        mask = torch.arange(words.shape[1]).view(1, -1) < torch.tensor(lengths).view(-1, 1)
        scores = self.span_scores(words.shape[1]).expand(len(lengths), -1, -1)
        tree_log_z = tree_crf.TreeCRF(scores, lengths).partition - tree_crf.TreeCRF(scores.detach() * 0, lengths).partition
        return (emitted * mask).sum(1) + tree_log_z

    @torch.no_grad()
    def read(self, tokens, words, n_layers=None, products=None) -> list[Reading]:
        from grammar_induce.structures import tree_crf

        n = max(len(w) for w in words)
        found = tree_crf.TreeCRF(self.span_scores(n).expand(len(words), -1, -1), [len(w) for w in words]).argmax(words)
        return [Reading(list(w), parsed_tree=tree) for w, tree in zip(words, found)]


WIDTH = Family("toy-width", "a width-score toy", WidthCRF, WidthConfig, ToyTrainConfig,
               Yields(own_trees=True, search="CKY over width scores"), recipe=sentences.SentenceRecipe)


def test_a_toy_family_that_trains_itself_goes_through_train_resume_parse_evaluate_ensembles_and_distill(
        monkeypatch, tmp_path, tiny_run, ctrl_c_raises):
    """Defined in this file alone: `train` fits it (and resumes it to the same weights after an interruption),
    `parse`, `evaluate`, an ensemble beside a language model and `distill` take it like any model."""
    import os
    import signal


    register(monkeypatch, WIDTH)
    tiny = tmp_path / "toy.toml"  # its own config file: its own [model] key, its recipe's [train]
    tiny.write_text(TOY_CONFIG.format(root=ROOT))
    with pytest.raises(ConfigError, match=r"model.emb_size is not read by a width-score toy \(model.kind 'toy-width'"):
        gi.train(tiny, tmp_path / "refused", overrides=["model.emb_size=8"], log=None)
    settings = {}
    straight = gi.train(tiny, tmp_path / "straight", settings=settings, log=None)
    assert len(checkpoint.load(tmp_path / "straight" / "best.pt").model.width) == 32
    first, second = (e["valid_ppl"] for e in straight.epochs)
    assert second < first  # it learns
    original, calls = sentences.sentence_step, {"n": 0}

    def step_then_maybe_interrupt(*args, **kwargs):
        calls["n"] += 1
        value = original(*args, **kwargs)
        if calls["n"] in (3, 40):
            os.kill(os.getpid(), signal.SIGINT)
        return value

    monkeypatch.setattr(sentences, "sentence_step", step_then_maybe_interrupt)
    out = tmp_path / "interrupted"
    with pytest.raises(KeyboardInterrupt):  # after last.pt is saved, the caller's script stops as Ctrl-C says
        gi.train(tiny, out, settings=settings, log=None)
    while torch.load(out / "last.pt", weights_only=True)["training_state"]["epoch"] <= 2:
        try:
            gi.train(tiny, out, resume=True, log=None)
        except KeyboardInterrupt:
            pass
    a, b = (torch.load(path / "last.pt", weights_only=True)["state_dict"] for path in (tmp_path / "straight", out))
    assert all(torch.equal(a[k], b[k]) for k in a)

    model = out / "best.pt"
    assert checkpoint.load(model).model.width.detach().abs().sum() > 0  # it learned its width scores
    tree = gi.load(model).parse(SENTENCE)
    assert tree.leaves() == SENTENCE.split()
    report = gi.evaluate(gi.load(model), gold=str(QUICKSTART_GOLD))
    assert set(report.rows) >= {"toy-width (CKY over width scores)", "right-branching"}
    both = gi.load(model, tiny_run / "best.pt")
    assert both.parse(SENTENCE).leaves() == SENTENCE.split()
    student = gi.distill(model, tiny_run / "best.pt", train=ROOT / "data" / "synthetic" / "valid.txt",
                         valid=ROOT / "data" / "synthetic" / "test.txt", out=tmp_path / "student", epochs=1,
                         emb_size=8, hidden_size=8, n_layers=1, max_length=12, log=None)
    assert student.parse(SENTENCE).leaves() == SENTENCE.split()
    assert checkpoint.load(tmp_path / "student" / "best.pt").provenance["teachers"][0] == str(model)
