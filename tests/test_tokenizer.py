"""text/tokenizer.py: how lines become the words a model reads."""

import pytest

from grammar_induce.files import read_lines
from grammar_induce.text.tokenizer import Tokenizer

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
