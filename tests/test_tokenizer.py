"""text/tokenizer.py: how lines become the words a model reads."""

import json
import random
import re

import pytest

from grammar_induce.files import read_lines
from grammar_induce.text.tokenizer import Tokenizer

from .conftest import TREEBANK_TOKENIZER, invoke, sole_line_error

ENGLISH = Tokenizer("treebank", lowercase=True, replace_digits=True)
CHINESE = Tokenizer("jieba", lowercase=True, replace_digits=True, punctuation_aside=True, fold_width=True)


@pytest.mark.parametrize("line, words", [
    ("the director nov. N said", ["the", "director", "nov.", "N", "said"]),  # the PTB text's number is no capital
    ("no. N in the list and sept. N", ["no.", "N", "in", "the", "list", "and", "sept.", "N"]),
    ("Profits rose. Analysts were surprised.", ["profits", "rose", "analysts", "were", "surprised"]),
])
def test_a_period_is_split_off_only_before_a_capitalised_word(line, words):
    assert ENGLISH(line) == words


def test_addresses_and_numbers_stay_one_token():
    line = "See http://example.com/a?b=1. Mail a.b@x.org, or visit (www.x.org) for 3.5 or 1,000."
    assert ENGLISH.split(line) == ["See", "http://example.com/a?b=1", ".", "Mail", "a.b@x.org", ",", "or", "visit",
                                   "(", "www.x.org", ")", "for", "3.5", "or", "1,000", "."]


@pytest.mark.parametrize("line, tokens, words", [
    ("售价¥8,999元", ["售价", "¥", "8,999", "元"], ["售价", "N,N", "元"]),  # as CTB writes ８，９９９: one word
    ("增长１２．５", ["增长", "１２．５"], ["增长", "N.N"]),
    ("访问http://x.cn/a，好", ["访问", "http://x.cn/a", "，", "好"], ["访问", "http://x.cn/a", "好"]),
])
def test_chinese_numbers_and_addresses_stay_one_token_as_typed(line, tokens, words):
    assert CHINESE.split(line) == tokens
    assert CHINESE(line) == words


def test_a_byte_order_mark_at_the_start_of_any_line_is_dropped(tmp_path):
    path = tmp_path / "joined.txt"
    path.write_bytes("\ufeffthe dog\n\ufeffa cat\n".encode())
    assert [ENGLISH(line) for _, line in read_lines(path)] == [["the", "dog"], ["a", "cat"]]


def test_quotes_come_back_as_they_were_typed(ptb):
    for text in ('He said "hello there" to me.', "a '' b c", "“Curly” quotes stay"):
        tree = ptb.parse(text)
        assert "".join(tree.leaves()) == text.replace(" ", "")
    assert ptb.parse('"the old man" saw "a dog"').leaves()[0] == '"'


def test_vocabulary_words_special_tokens_and_numbers_stay_whole():
    tokens, is_word = TREEBANK_TOKENIZER.read("the s&l said <unk> rose N % to $ N", {"s&l", "<unk>", "N"})
    assert tokens == ["the", "s&l", "said", "<unk>", "rose", "N", "%", "to", "$", "N"] and all(is_word)
    assert TREEBANK_TOKENIZER("the s&l said <unk> rose N") == ["the", "s&l", "said", "<unk>", "rose", "N"]
    assert TREEBANK_TOKENIZER.read("at&t and S&L")[0] == ["at&t", "and", "S&L"]


def test_the_ptb_lm_text_parses_the_same_as_the_whitespace_split(ptb):
    line = "the s&l industry 's <unk> rose N N in the third quarter"
    tree = ptb.parse(line)
    assert tree.leaves() == line.split()


def test_a_sentence_final_period_inside_a_line_is_split_off():
    assert TREEBANK_TOKENIZER.split("profits rose. Analysts were surprised.") == \
        ["profits", "rose", ".", "Analysts", "were", "surprised", "."]
    assert TREEBANK_TOKENIZER.split("sales fell 5%. Mr. Smith left in 1990. He said so.") == \
        ["sales", "fell", "5", "%", ".", "Mr.", "Smith", "left", "in", "1990", ".", "He", "said", "so", "."]
    assert TREEBANK_TOKENIZER.split('He said "Profits rose." Analysts were surprised.')[4:8] == ["rose", ".", '"', "Analysts"]
    assert TREEBANK_TOKENIZER.split("It cost 5 vs. 6 etc. Then it ended.") == \
        ["It", "cost", "5", "vs.", "6", "etc.", "Then", "it", "ended", "."]  # abbreviations stay


def test_a_byte_order_mark_does_not_become_part_of_a_word(tiny_run, tmp_path):
    text = tmp_path / "in.txt"
    text.write_bytes("\ufeffthe dog ran\n".encode())
    result = invoke("parse", "--model", tiny_run / "best.pt", "--input", text, "--format", "json")
    assert json.loads(result.output) == json.loads(invoke("parse", "--model", tiny_run / "best.pt", "--format", "json",
                                                       "the dog ran").output)
    text.write_bytes(b"the\x00dog ran\n")
    sole_line_error(invoke("parse", "--model", tiny_run / "best.pt", "--input", text), "in.txt:1: control character U+0000")


TRICKY = ['"Hello," she said. "It\'s 5:30 -- isn\'t it?"', "He cannot go; gonna wait (maybe) [or not] {ok} <fine>.",
          "''Quoted'' and ``quoted'' text... 'Tis done!", "Costs: $3.88, 3,36 euros & 10% of AT&T's; @home #1",
          "They'll say we'd've gone, wanna bet D'ye more'n that?", "'twas the night' ", '"', "'", ":", "a.", "x -- y--z",
          "GoNNa CANNOT LeMMe 'TIS", "'ti\u017f \u212aelvin gotta\u0131 wanna", "plain words and N <unk> here"]


@pytest.mark.parametrize("line", TRICKY)
def test_the_treebank_tables_compiled_by_re_split_as_nltks_own(line):
    """The tables run by the standard library's `re` (text/nltk_treebank.py), each pattern scanning only the lines
    that hold what its matches hold, give nltk's tokenizer's own tokens and spans, whatever engine this nltk runs
    them with (a long s, a Kelvin sign and a dotless i match s, k and i case aside: those lines are scanned)."""
    from nltk.tokenize import TreebankWordTokenizer

    from grammar_induce.text.nltk_treebank import treebank_tokenizer

    theirs, ours = TreebankWordTokenizer(), treebank_tokenizer()
    assert ours.tokenize(line) == theirs.tokenize(line)
    assert list(ours.span_tokenize(line)) == list(theirs.span_tokenize(line))


PIECES = ["cannot", "CanNot", "gimme", "GONNA", "gotta", "lemme", "more'n", "wanna", "'tis", "'Twas", "d'ye", "\u212a",
          "\u017f", "\u0131", '"', "''", "``", "'", "`", "(", ")", "[", "]", "{", "}", "<", ">", "--", "...", ".", ",", ":",
          ";", "?", "!", "@", "#", "$", "%", "&", "'s", "n't", "N'T", "'ll", "'re", "'ve", "'m", "'d", "Mr.", "rose.", "The",
          "1,000", "3.5", "\u201c", "\u00e9t\u00e9", "\t", "word", "N", "<unk>"]


def test_random_lines_split_as_nltks_own():
    """3,000 seeded lines of the pieces the patterns look for, run together or apart: nltk's tokens and spans."""
    from nltk.tokenize import TreebankWordTokenizer

    from grammar_induce.text.nltk_treebank import treebank_tokenizer

    theirs, ours, draw = TreebankWordTokenizer(), treebank_tokenizer(), random.Random(7)
    for _ in range(3000):
        line = "".join(draw.choice(PIECES) + draw.choice(["", " "]) for _ in range(draw.randint(1, 10)))
        assert ours.tokenize(line) == theirs.tokenize(line), line
        assert list(ours.span_tokenize(line)) == list(theirs.span_tokenize(line)), line


def test_every_treebank_pattern_runs_on_re_and_most_scan_only_the_lines_that_need_them():
    from grammar_induce.text.nltk_treebank import _Checked, treebank_tokenizer

    ours = treebank_tokenizer()
    patterns = ([p for p, _ in ours.STARTING_QUOTES + ours.PUNCTUATION + ours.ENDING_QUOTES]
                + [ours.PARENS_BRACKETS[0], ours.DOUBLE_DASHES[0]] + ours.CONTRACTIONS2 + ours.CONTRACTIONS3)
    checked = [p for p in patterns if isinstance(p, _Checked)]
    assert all(type(p.compiled if isinstance(p, _Checked) else p) is re.Pattern for p in patterns)
    assert len(checked) == 21 and len(patterns) == 26  # all but the five that cost no more than a check
    assert next(p for p in checked if p.word == "gonna").sub(r" \1 \2 ", " GoNna go ") == "  GoN na  go "
    scanned = []

    class Spy:
        def sub(self, replacement, text):
            scanned.append(text)
            return text

    gonna, bracket = _Checked(Spy(), word="gonna"), _Checked(Spy(), characters="[](){}<>")
    for line in (" gon na ", " GONNA ", " gon na \u0131 ", "a(b", "ab"):
        gonna.sub("", line), bracket.sub("", line)
    assert scanned == [" GONNA ", " gon na \u0131 ", "a(b"]  # a line of other characters than ASCII is always scanned


def test_a_chunk_split_in_pieces_stays_whole_only_when_known():
    assert Tokenizer("treebank").split("The S&L x;y now.", known={"x;y"}) == ["The", "S&L", "x;y", "now", "."]
    assert Tokenizer("treebank").split("The S&L x;y now.") == ["The", "S&L", "x", ";", "y", "now", "."]


@pytest.mark.parametrize("line, tokens", [
    ("'Hello,' he said.", ["'", "Hello", ",", "'", "he", "said", "."]),
    ("He said 'no' twice.", ["He", "said", "'", "no", "'", "twice", "."]),
    ("the '80s and rock 'n' roll", ["the", "'80s", "and", "rock", "'n", "'", "roll"]),
    ("the dog's bone, it's 'em", ["the", "dog", "'s", "bone", ",", "it", "'s", "'em"]),
])
def test_an_opening_single_quote_comes_apart_from_its_word(line, tokens):
    assert Tokenizer("treebank", lowercase=True, replace_digits=True).read(line)[0] == tokens


@pytest.mark.parametrize("line, tokens, read", [
    ("“Hello,” she said.", ["“", "Hello", ",", "”", "she", "said", "."], ["hello", "she", "said"]),
    ("It’s the dog’s bone.", ["It", "’s", "the", "dog", "’s", "bone", "."], ["it", "'s", "the", "dog", "'s", "bone"]),
    ("‘Yes,’ he said.", ["‘", "Yes", ",", "’", "he", "said", "."], ["yes", "he", "said"]),
])
def test_curly_quotes_split_as_straight_ones_and_stay_as_typed(line, tokens, read):
    """Curly quotes stayed on their words (`“Hello`, `dog’s`): issue 70, class 14. They split as the straight ones
    do, each token keeps the characters typed, and the model reads `’s` as the `'s` it knows."""
    reader = Tokenizer("treebank", lowercase=True, replace_digits=True)
    found, is_word = reader.read(line)
    assert found == tokens
    assert [reader.normalize(t) for t, word in zip(found, is_word) if word] == read
