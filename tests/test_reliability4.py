"""Reliability round 4 (issue 30): a test per case, each failing on the code before it (0046959)."""

import json

import pytest

import grammar_induce as gi
from grammar_induce import trees
from grammar_induce.files import InputError, SettingError
from grammar_induce.text.tokenizer import Tokenizer

from .test_reliability import GOLD, cli, one_line_error

TREEBANK = Tokenizer("treebank", lowercase=True, replace_digits=True)


@pytest.fixture(scope="module")
def ptb():
    return gi.load("ptb")


# --- 4. typed quotes come back as typed --------------------------------------------------------------

def test_quotes_come_back_as_they_were_typed(ptb):
    for text in ('He said "hello there" to me.', "a '' b c", "“Curly” quotes stay"):
        tree = ptb.parse(text)
        assert "".join(tree.leaves()) == text.replace(" ", "")
    assert ptb.parse('"the old man" saw "a dog"').leaves()[0] == '"'


# --- 5. the treebank tokenizer keeps what the PTB text writes whole ------------------------------------

def test_vocabulary_words_special_tokens_and_numbers_stay_whole():
    tokens, is_word = TREEBANK.read("the s&l said <unk> rose N % to $ N", {"s&l", "<unk>", "N"})
    assert tokens == ["the", "s&l", "said", "<unk>", "rose", "N", "%", "to", "$", "N"] and all(is_word)
    assert TREEBANK("the s&l said <unk> rose N") == ["the", "s&l", "said", "<unk>", "rose", "N"]
    assert TREEBANK.read("at&t and S&L")[0] == ["at&t", "and", "S&L"]


def test_the_ptb_lm_text_parses_the_same_as_the_whitespace_split(ptb):
    line = "the s&l industry 's <unk> rose N N in the third quarter"
    tree = ptb.parse(line)
    assert tree.leaves() == line.split()


# --- 6. several sentences on one line ----------------------------------------------------------------

def test_a_sentence_final_period_inside_a_line_is_split_off():
    assert TREEBANK.split("profits rose. Analysts were surprised.") == \
        ["profits", "rose", ".", "Analysts", "were", "surprised", "."]
    assert TREEBANK.split("sales fell 5%. Mr. Smith left in 1990. He said so.") == \
        ["sales", "fell", "5", "%", ".", "Mr.", "Smith", "left", "in", "1990", ".", "He", "said", "so", "."]
    assert TREEBANK.split('He said "Profits rose." Analysts were surprised.')[4:8] == ["rose", ".", '"', "Analysts"]
    assert TREEBANK.split("It cost 5 vs. 6 etc. Then it ended.") == \
        ["It", "cost", "5", "vs.", "6", "etc.", "Then", "it", "ended", "."]  # abbreviations stay


# --- 8. distilling from nothing is refused -------------------------------------------------------------

def test_distill_with_no_sentence_short_enough_is_refused_with_the_count(tiny_run, tmp_path):
    text = tmp_path / "long.txt"
    text.write_text("a b c d e\nf g h i j k\n")
    result = cli("distill", "--model", tiny_run / "best.pt", "--train", text, "--valid", text, "--out",
                 tmp_path / "student", "--max-length", "3")
    one_line_error(result, "long.txt: none of its 2 sentences has 3 to 3 words")


# --- 10. the API checks what the CLI checks, at load, in the same words -------------------------------

@pytest.mark.parametrize("setting, value, message", [
    ("layer", 7, "layer 7 is out of range: the model has layers 1 to 3"),
    ("distance", "bogus", "distance must be one of forget, input"),
    ("decoder", "bogus", "decoder must be one of paper, gap"),
    ("combine", "bogus", "combine must be one of mbr, mean"),
    ("batch_size", 0, "batch_size must be a whole number of at least 1"),
    ("precision", "fp64", "precision must be one of fp32, bf16, auto"),
])
def test_load_refuses_bad_settings_at_once(setting, value, message):
    with pytest.raises(SettingError, match=message):
        gi.load("ptb", **{setting: value})


def test_the_command_line_says_the_same_with_its_flag():
    one_line_error(cli("parse", "--model", "ptb", "--layer", "7", "a b"), "--layer 7 is out of range")


# --- 11. parse and parse_many take text, and say so -----------------------------------------------------

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


# --- 12. evaluate takes paths as str or Path, and explains None -----------------------------------------

def test_evaluate_takes_str_and_path_and_explains_none(tmp_path):
    gold_trees = [line for line in GOLD.read_text().splitlines() if line.strip()]
    pred = tmp_path / "pred.txt"
    pred.write_text("\n".join(gold_trees) + "\n")
    for predicted, gold in ((str(pred), str(GOLD)), (pred, GOLD)):
        report = gi.evaluate(predicted, gold=gold)
        assert report.rows[report.main_row].sentence_f1 == 1.0
    with pytest.raises(TypeError, match="tree 2 is None"):
        gi.evaluate([gold_trees[0], None] + gold_trees[2:], gold=GOLD)


# --- 13. distill checks its settings before the teachers parse ------------------------------------------

@pytest.mark.parametrize("settings, message", [
    ({"epochs": 0}, "epochs must be a whole number of at least 1"),
    ({"lr": float("nan")}, "lr must be a positive number"),
    ({"student_batch_size": 0}, "student_batch_size must be a whole number"),
    ({"bogus": 3}, "unexpected keyword argument 'bogus'"),
])
def test_distill_refuses_bad_settings_before_any_work(settings, message, tmp_path):
    with pytest.raises(InputError, match=message):  # the texts do not exist: they were never read
        gi.distill("ptb", train=tmp_path / "none.txt", valid=tmp_path / "none.txt", out=tmp_path / "s", **settings)
    assert not (tmp_path / "s").exists()


# --- 14. continuation lines in column 0 ------------------------------------------------------------------

def test_gold_trees_whose_continuation_lines_start_in_column_0_are_read(tmp_path):
    gold = tmp_path / "gold.mrg"
    gold.write_text("(S (NP (DT the) (NN dog))\n(VP (VBD barked)))\n(S (NP (DT a) (NN cat)) (VP (VBD sat)))\n")
    report = gi.evaluate(["((the dog) barked)", "((a cat) sat)"], gold=gold)
    assert report.sentences == 2 and report.rows[report.main_row].sentence_f1 == 1.0
    bad = tmp_path / "bad.mrg"
    bad.write_text("(S (NP (DT the) (NN dog))\n(S (NP (DT a) (NN cat)) (VP (VBD sat)))\n")
    with pytest.raises(InputError, match="bad.mrg:1: unbalanced brackets"):
        gi.evaluate(["((a cat) sat)"], gold=bad)


# --- 19. one jsonl schema; blank lines are JSON ----------------------------------------------------------

def test_every_jsonl_line_is_json_with_the_words_the_model_read():
    result = cli("parse", "--model", "ptb", "--format", "jsonl", "The 3.5 dogs", "", "the dogs barked .")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["words"] for line in lines] == [["the", "N", "dogs"], [], ["the", "dogs", "barked"]]
    assert lines[1] == {"tokens": [], "words": [], "tree": None}
    assert lines[0].keys() == lines[2].keys() and trees.leaves(lines[2]["tree"]) == ["the", "dogs", "barked", "."]



# --- 1, 2. distill never overwrites what is not a student, replaces a student only at the end, resumes --

SMALL = {"emb_size": 16, "hidden_size": 16, "n_layers": 1, "max_length": 12, "epochs": 2}


def small_text(tmp_path, count=60):
    from .test_distill import SYNTHETIC

    path = tmp_path / "train.txt"
    path.write_text("".join(SYNTHETIC.joinpath("train.txt").read_text().splitlines(keepends=True)[:count]))
    return path


def test_distill_never_writes_over_a_language_model(tiny_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    before = (run / "best.pt").read_bytes()
    text = small_text(tmp_path)
    result = cli("distill", "--model", tiny_run / "best.pt", "--train", text, "--valid", text, "--out", run, "--force")
    one_line_error(result, "its best.pt is an ON-LSTM language model (onlstm), not a distilled student")
    assert (run / "best.pt").read_bytes() == before and not (tmp_path / "run.partial").exists()


def test_a_failed_start_leaves_no_folder(tiny_run, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    with pytest.raises(InputError):
        gi.distill(tiny_run / "best.pt", train=empty, valid=empty, out=tmp_path / "s", **SMALL)
    assert not (tmp_path / "s").exists() and not (tmp_path / "s.partial").exists()


def test_an_interrupted_distillation_keeps_the_old_student_and_resumes_to_the_same_student(tiny_run, tmp_path,
                                                                                          monkeypatch):
    from grammar_induce.models import checkpoint
    from grammar_induce.workflows import distillation

    text = small_text(tmp_path)
    whole = gi.distill(tiny_run / "best.pt", train=text, valid=text, out=tmp_path / "whole", log=lambda s: None,
                       **SMALL)
    out = tmp_path / "out"
    gi.distill(tiny_run / "best.pt", train=text, valid=text, out=out, log=lambda s: None, **{**SMALL, "seed": 7})
    old = {name: (out / name).read_bytes() for name in ("best.pt", "distill.jsonl")}

    calls = []
    agreement = distillation.agreement_with

    def interrupted_in_epoch_2(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return agreement(*args, **kwargs)

    monkeypatch.setattr(distillation, "agreement_with", interrupted_in_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        gi.distill(tiny_run / "best.pt", train=text, valid=text, out=out, force=True, log=lambda s: None, **SMALL)
    monkeypatch.undo()
    assert {name: (out / name).read_bytes() for name in old} == old  # the old student is whole
    assert (tmp_path / "out.partial" / "resume.pt").exists()
    with pytest.raises(InputError, match="holds an interrupted distillation: add --resume"):
        gi.distill(tiny_run / "best.pt", train=text, valid=text, out=out, force=True, **SMALL)
    resumed = gi.distill(tiny_run / "best.pt", train=text, valid=text, out=out, force=True, resume=True,
                         log=lambda s: None, **SMALL)
    assert not (tmp_path / "out.partial").exists()
    a, b = checkpoint.read(whole.models[0].source), checkpoint.read(resumed.models[0].source)
    assert all((a["state_dict"][k] == b["state_dict"][k]).all() for k in a["state_dict"])
    epochs = [json.loads(line)["epoch"] for line in (out / "distill.jsonl").read_text().splitlines()]
    assert epochs == [1, 2]


# --- 3, 9. all outputs or none; a full device is one line --------------------------------------------------

def test_evaluate_writes_all_its_files_or_none(tiny_run, tmp_path):
    result = cli("evaluate", "--model", tiny_run / "best.pt", "--quiet", "--json", tmp_path / "a.json",
                 "--report", "/dev/full")
    one_line_error(result, "/dev/full: cannot write (No space left on device)")
    assert list(tmp_path.iterdir()) == []  # a.json was not written, and no temporary is left


def test_a_full_device_or_standard_output_is_one_line(tiny_run):
    one_line_error(cli("parse", "--model", tiny_run / "best.pt", "--output", "/dev/full", "a b c"),
                   "/dev/full: cannot write (No space left on device)")
    one_line_error(cli("evaluate", "--model", tiny_run / "best.pt", "--quiet", "--json", "/dev/full"),
                   "/dev/full: cannot write")
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "grammar_induce", "parse", "--model", str(tiny_run / "best.pt"),
                               "a b c"], check=False, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "Error: standard output: cannot write (No space left on device)" in done.stderr


# --- 7, 15. rescoring: extra tokens said, extra words refused, the tag-set hint kept --------------------

def test_rescoring_reports_dropped_punctuation_and_refuses_extra_words(tmp_path):
    gold = tmp_path / "gold.mrg"
    gold.write_text("(S (NP (DT The) (NN dog)) (VP (VBD barked)) (. .))\n")
    punct = tmp_path / "punct.txt"
    punct.write_text("((The dog) (barked .))\n")
    result = cli("evaluate", "--pred", punct, "--gold", gold)
    assert result.exit_code == 0 and "note: 1 predicted token the gold trees do not have" in result.stdout
    assert "the first '.' at " in result.stdout
    extra = tmp_path / "extra.txt"
    extra.write_text("((The dog) (barked loudly))\n")
    one_line_error(cli("evaluate", "--pred", extra, "--gold", gold), "1 word the gold tree at", "loudly")


def test_rescoring_chinese_trees_as_english_keeps_the_hint(tmp_path):
    gold = tmp_path / "ctb.trees"
    gold.write_text("(TOP (IP (NP (NN 经济)) (VP (VV 发展)) (PU 。)))\n(TOP (IP (NP (NN 城市)) (VP (VV 建设)) (PU ，)))\n")
    pred = tmp_path / "pred.txt"
    pred.write_text("((经济 发展) 。)\n((城市 建设) ，)\n")  # what `parse` prints of these sentences
    one_line_error(cli("evaluate", "--pred", pred, "--gold", gold), "1 word the gold tree",
                   "for Chinese Treebank trees use --treebank ctb")  # not scored as if 发展 were not there
    assert cli("evaluate", "--pred", pred, "--gold", gold, "--treebank", "ctb").exit_code == 0


# --- 18. options without effect and settings left out are said -----------------------------------------

def test_a_students_layer_and_decoder_have_no_effect_and_say_so(tiny_run, tmp_path):
    text = small_text(tmp_path)
    gi.distill(tiny_run / "best.pt", train=text, valid=text, out=tmp_path / "s", log=lambda s: None, **SMALL)
    result = cli("parse", "--model", tmp_path / "s" / "best.pt", "--layer", "2", "--decoder", "gap", "a b c")
    assert result.exit_code == 0 and "note: --layer, --decoder have no effect with a distilled student" in result.stderr


def test_a_shipped_pair_in_an_ensemble_says_its_settings_are_not_used():
    result = cli("parse", "--model", "ptb-pair", "--model", "ptb", "a b c")
    assert result.exit_code == 0 and "note: ptb-pair: its own parse settings" in result.stderr
    assert "own parse settings" not in cli("parse", "--model", "ptb-pair", "a b c").stderr


# --- 17. trees come as their lines do -------------------------------------------------------------------

def test_parse_many_of_a_generator_reads_a_batch_before_its_first_tree(ptb):
    read = []

    def lines():
        for k in range(200):
            read.append(k)
            yield "the dog barked"

    assert next(ptb.parse_many(lines(), batch_size=8)).leaves() == ["the", "dog", "barked"]
    assert len(read) <= 9  # a batch, and the one line that shows it is full


@pytest.mark.slow
def test_a_tree_is_printed_before_the_pipe_closes(tiny_run):
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "grammar_induce", "parse", "--model", str(tiny_run / "best.pt")],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        process.stdin.write("a b c\n")
        process.stdin.flush()
        import select

        assert select.select([process.stdout], [], [], 60)[0], "no tree while the pipe is open"
        first = process.stdout.readline()  # the pipe is still open: the tree came because the line did
        assert trees.leaves(trees.parse_brackets(first.strip())) == ["a", "b", "c"]
        process.stdin.write("d e\n")
        process.stdin.close()
        assert trees.leaves(trees.parse_brackets(process.stdout.readline().strip())) == ["d", "e"]
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()


# --- 16. the tool's own output rescored: another tokenization of a gold word is aligned --------------------

def test_the_tools_own_tokenization_of_gold_words_is_rescored(tmp_path):
    gold = tmp_path / "gold.mrg"
    gold.write_text("(S (NP (NNP Gotta) (NNP U.S.)) (VP (VBD fell)))\n(S (NP (NNP S&L)) (VP (VBD rose)) (. .))\n")
    pred = tmp_path / "pred.txt"
    pred.write_text("(((Got ta) (U.S .)) fell)\n((S&L rose) .)\n")  # how parse splits `Gotta U.S. fell`
    result = cli("evaluate", "--pred", pred, "--gold", gold)
    assert result.exit_code == 0, result.output
    report = gi.evaluate(pred, gold=gold)
    assert report.rows["predicted"].sentence_f1 == 1.0
    assert "1 predicted token the gold trees do not have" in result.stdout  # the final "." only


def test_rows_without_spans_say_n_a_and_the_random_row_counts_the_sentences(tmp_path):
    gold = tmp_path / "gold.mrg"
    gold.write_text("(S (NN a) (VB b))\n(S (NN c) (VB d))\n(S (NP (NN e) (NN f)) (VB g))\n")
    result = cli("evaluate", "--pred", gold, "--gold", gold, "--max-length", "2", "--json", tmp_path / "r.json")
    assert result.exit_code == 0, result.output
    assert "n/a" in next(line for line in result.stdout.splitlines() if line.startswith("predicted"))
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert rows["random"]["sentences"] == rows["predicted"]["sentences"] == 2


def test_the_quick_start_config_says_its_vocabulary_size():
    from .conftest import ROOT

    text = (ROOT / "grammar_induce" / "resources" / "quickstart.toml").read_text()
    words = {w for line in (ROOT / "grammar_induce" / "resources" / "synthetic" / "train.txt").open() for w in line.split()}
    assert f"a vocabulary of {len(words)} words" in text


def test_a_students_long_line_is_split_greedily_and_says_so(tiny_run, tmp_path, monkeypatch):
    from grammar_induce.models import structs

    text = small_text(tmp_path)
    gi.distill(tiny_run / "best.pt", train=text, valid=text, out=tmp_path / "s", log=lambda s: None, **SMALL)
    words = " ".join(f"w{k % 7}" for k in range(30))
    exact = cli("parse", "--model", tmp_path / "s" / "best.pt", words)
    monkeypatch.setattr(structs, "EXACT_LIMIT", 10)
    greedy = cli("parse", "--model", tmp_path / "s" / "best.pt", words, "a b")
    assert greedy.exit_code == 0 and "1 line of more than 10 words: the student's CKY split them greedily" in greedy.stderr
    assert trees.leaves(trees.parse_brackets(greedy.stdout.splitlines()[0])) == words.split()
    assert "greedily" not in exact.stderr
