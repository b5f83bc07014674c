from collections import Counter

import pytest
import torch

from grammar_induce.errors import InputError
from grammar_induce.families.registry import CONFIGS
from grammar_induce.text import corpus
from grammar_induce.text.tokenizer import EOS, UNK, Tokenizer, Vocab, batchify, get_batch

from .plain_corpus import encode_stream


def test_whitespace_char_and_normalisation():
    assert Tokenizer()("  The  cat\tsat ") == ["The", "cat", "sat"]
    assert Tokenizer(lowercase=True, replace_digits=True)("In 1987 , S&P-500 fell 12.5 %") == \
        ["in", "N", ",", "s&p-N", "fell", "N.N", "%"]
    assert Tokenizer("char")("苹果 的") == ["苹", "果", "的"]


def test_jieba_segments_chinese():
    words = Tokenizer("jieba")("我喜欢吃苹果")
    assert "".join(words) == "我喜欢吃苹果" and "苹果" in words


def test_vocab_order_limits_and_unknown_words():
    vocab = Vocab.build(Counter("babccc"))
    assert vocab.words == [UNK, EOS, "c", "b", "a"]
    assert vocab.encode(["c", "zzz"]) == [2, 0]
    assert Vocab.build(Counter("bab"), max_size=3).words == [UNK, EOS, "b"]
    assert Vocab.build(Counter("bab"), min_freq=2).words == [UNK, EOS, "b"]
    with pytest.raises(ValueError):
        Vocab(["a", "b"])


def test_stream_batchify_and_batches():
    vocab = Vocab([UNK, EOS, "a", "b"])
    stream = encode_stream([["a", "b"], ["b"]], vocab)
    assert stream.tolist() == [2, 3, 1, 3, 1]
    data = batchify(torch.arange(10), 3)  # 9 tokens used, 3 rows of 3
    assert data.tolist() == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    inputs, targets = get_batch(data, 0, 5)  # clipped at the end of the stream
    assert inputs.tolist() == [[0, 3, 6], [1, 4, 7]] and targets.tolist() == [[1, 4, 7], [2, 5, 8]]


def test_training_text_errors_name_file_and_line(tmp_path):
    """The token cache's reader (every training file goes through it) names the file, and the line."""
    def prepare(path):
        return corpus.prepare(CONFIGS.from_dict({}), str(path))

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"good line\nstill good\nbad \xff byte\n")
    with pytest.raises(InputError, match=r"bad.txt:3: not UTF-8"):
        prepare(bad)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n   \n\n")
    with pytest.raises(InputError, match="empty.txt: no sentences"):
        prepare(empty)
    with pytest.raises(InputError, match="cannot read"):
        prepare(tmp_path / "missing.txt")


def test_blank_lines_are_skipped_and_counted(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("a b\n\n  \nc\r\n")
    assert "3 tokens in 2 sentences (2 blank lines skipped)" in corpus.prepare(CONFIGS.from_dict({}), str(path))
