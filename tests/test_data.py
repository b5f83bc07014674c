import pytest
import torch

from grammar_induce.text.tokenizer import (
    EOS,
    UNK,
    InputError,
    Tokenizer,
    Vocab,
    batchify,
    build_vocab,
    encode_stream,
    get_batch,
    read_corpus,
)


def test_whitespace_char_and_normalisation():
    assert Tokenizer()("  The  cat\tsat ") == ["The", "cat", "sat"]
    assert Tokenizer(lowercase=True, replace_digits=True)("In 1987 , S&P-500 fell 12.5 %") == \
        ["in", "N", ",", "s&p-N", "fell", "N.N", "%"]
    assert Tokenizer("char")("苹果 的") == ["苹", "果", "的"]


def test_jieba_segments_chinese():
    words = Tokenizer("jieba")("我喜欢吃苹果")
    assert "".join(words) == "我喜欢吃苹果" and "苹果" in words


def test_vocab_order_limits_and_unknown_words():
    vocab = build_vocab([["b", "a", "b", "c", "c", "c"]])
    assert vocab.words == [UNK, EOS, "c", "b", "a"]
    assert vocab.encode(["c", "zzz"]) == [2, 0]
    assert build_vocab([["b", "a", "b"]], max_size=3).words == [UNK, EOS, "b"]
    assert build_vocab([["b", "a", "b"]], min_freq=2).words == [UNK, EOS, "b"]
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


def test_corpus_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"good line\nstill good\nbad \xff byte\n")
    with pytest.raises(InputError, match=r"bad.txt:3: not UTF-8"):
        read_corpus(bad, Tokenizer())
    empty = tmp_path / "empty.txt"
    empty.write_text("\n   \n\n")
    with pytest.raises(InputError, match="empty.txt: no sentences"):
        read_corpus(empty, Tokenizer())
    with pytest.raises(InputError, match="cannot read"):
        read_corpus(tmp_path / "missing.txt", Tokenizer())


def test_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("a b\n\n  \nc\r\n")
    assert read_corpus(path, Tokenizer()) == ([["a", "b"], ["c"]], 2)
