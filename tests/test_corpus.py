
import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grammar_induce.config import DataConfig
from grammar_induce.errors import InputError
from grammar_induce.text import corpus
from grammar_induce.text.tokenizer import EOS, Tokenizer

from .conftest import ROOT, invoke, one_line_error
from .plain_corpus import build_vocab, encode_stream, read_corpus
from .test_cli import CHINESE, run

TEXT = ROOT / "data" / "synthetic" / "valid.txt"


def reference(path, tokenizer=None, backward=False):
    """The ids the in-memory reader gives (the path training took before the cache)."""
    sentences, _ = read_corpus(path, tokenizer or Tokenizer())
    sentences = [s[::-1] for s in sentences] if backward else sentences
    vocab = build_vocab(sentences)
    return vocab, encode_stream(sentences, vocab)


def entries(root):
    return sorted(p.name for p in root.iterdir() if not p.name.startswith("."))


def test_the_cache_holds_the_ids_the_text_gives_and_is_hit_the_second_time(tmp_path):
    entry = corpus.training_entry(str(TEXT), Tokenizer(), corpus.Limits(), tmp_path)
    vocab, ids = reference(TEXT)
    assert entry.vocab.words == vocab.words and torch.equal(entry.ids.long(), ids)
    assert entry.ids.dtype == torch.uint16 and entry.sentences == 500
    again = corpus.training_entry(str(TEXT), Tokenizer(), corpus.Limits(), tmp_path)
    assert again.path == entry.path and entries(tmp_path) == [entry.path.name]
    backward = corpus.training_entry(str(TEXT), Tokenizer(), corpus.Limits(), tmp_path, backward=True)
    assert torch.equal(backward.ids.long(), reference(TEXT, backward=True)[1]) and backward.path != entry.path


def test_a_changed_file_or_setting_makes_a_new_entry(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("The dog ran\nthe cat sat\n")
    first = corpus.training_entry(str(text), Tokenizer(), corpus.Limits(), tmp_path / "cache")
    lower = corpus.training_entry(str(text), Tokenizer(lowercase=True), corpus.Limits(), tmp_path / "cache")
    limited = corpus.training_entry(str(text), Tokenizer(), corpus.Limits(max_vocab=4), tmp_path / "cache")
    text.write_text("The dog ran\nthe cat sat down\n")
    changed = corpus.training_entry(str(text), Tokenizer(), corpus.Limits(), tmp_path / "cache")
    assert len({e.path for e in (first, lower, limited, changed)}) == 4
    assert "The" not in lower.vocab.index and len(limited.vocab) == 4
    assert [changed.vocab.words[i] for i in changed.ids.tolist()][-2:] == ["down", EOS]


@pytest.mark.parametrize("damage", ["truncated", "foreign", "out of range", "other key"])
def test_a_damaged_entry_is_rebuilt_not_trusted(tmp_path, damage):
    entry = corpus.training_entry(str(TEXT), Tokenizer(), corpus.Limits(), tmp_path)
    ids = entry.path / "ids.bin"
    if damage == "truncated":
        ids.write_bytes(ids.read_bytes()[:-6])
    elif damage == "foreign":
        (entry.path / "meta.json").write_text("not json")
    elif damage == "out of range":
        ids.write_bytes(b"\xff\xff" + ids.read_bytes()[2:])
    else:
        (entry.path / "meta.json").write_text((entry.path / "meta.json").read_text().replace(entry.path.name, "0" * 40))
    assert corpus._load(entry.path, entry.path.name) is None
    rebuilt = corpus.training_entry(str(TEXT), Tokenizer(), corpus.Limits(), tmp_path)
    assert torch.equal(rebuilt.ids.long(), reference(TEXT)[1])


def test_parallel_jieba_gives_what_one_process_gives(tmp_path, monkeypatch):
    text = tmp_path / "zh.txt"
    text.write_text("\n".join(CHINESE + ["", "我们在北京学习"] + CHINESE[::-1]) + "\n", encoding="utf-8")
    monkeypatch.setattr(corpus, "CHUNK_LINES", 7)  # many chunks, so their order matters
    tokenizer = Tokenizer("jieba")
    serial = corpus.training_entry(str(text), tokenizer, corpus.Limits(), tmp_path / "one", workers=1)
    parallel = corpus.training_entry(str(text), tokenizer, corpus.Limits(), tmp_path / "two", workers=2)
    assert parallel.vocab.words == serial.vocab.words and torch.equal(parallel.ids, serial.ids)
    assert serial.blank_lines == 1 and torch.equal(serial.ids.long(), reference(text, tokenizer)[1])


def test_validation_files_are_encoded_with_the_training_vocabulary(tmp_path):
    train = corpus.training_entry(str(TEXT), Tokenizer(), corpus.Limits(max_vocab=50), tmp_path)
    test_file = ROOT / "data" / "synthetic" / "test.txt"
    valid = corpus.encoded_entry(str(test_file), Tokenizer(), train.vocab, tmp_path)
    assert torch.equal(valid.ids.long(), encode_stream(read_corpus(test_file, Tokenizer())[0], train.vocab))


def test_an_unwritable_cache_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match="cannot write the corpus cache .* set GRAMMAR_INDUCE_CACHE"):
        corpus.training_entry(str(TEXT), Tokenizer(), corpus.Limits(), blocker / "cache")


def test_prepare_from_the_command_line(tmp_path):
    result = run("prepare", TEXT, "--set", f"data.cache_dir={tmp_path / 'c'}", "--set", "data.max_vocab=20")
    assert result.exit_code == 0, result.output
    assert "valid.txt: " in result.output and "in 500 sentences" in result.output
    assert "vocabulary 20 (max_vocab 20, min_freq 1): covers" in result.output
    assert str(tmp_path / "c") in result.output


def test_a_cache_entry_with_changed_ids_or_vocabulary_is_rebuilt(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("the dog barked\nthe cat sat on the mat\n" * 20)
    root = tmp_path / "cache"
    reader = corpus.training_reader(DataConfig())
    entry = corpus.training_entry(str(text), reader, corpus.Limits(), root)
    ids, words = entry.ids.clone(), list(entry.vocab.words)
    (entry.path / "ids.bin").write_bytes(bytes((entry.path / "ids.bin").stat().st_size))  # zeroed, same size
    again = corpus.training_entry(str(text), reader, corpus.Limits(), root)
    assert torch.equal(again.ids, ids)
    meta = json.loads((again.path / "meta.json").read_text())
    meta["vocab"][2], meta["vocab"][3] = meta["vocab"][3], meta["vocab"][2]  # two words swapped
    (again.path / "meta.json").write_text(json.dumps(meta))
    assert corpus.training_entry(str(text), reader, corpus.Limits(), root).vocab.words == words


def test_empty_corpus_after_tokenisation(tmp_path):
    path = tmp_path / "blank.txt"
    path.write_text("   \n\t\n")
    result = invoke("train", "--config", ROOT / "configs" / "tiny.toml", "--train", path, "--out", tmp_path / "r")
    assert result.exit_code == 1 and "blank.txt: no sentences" in result.output
    assert not (tmp_path / "r" / "last.pt").exists()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=80))
def test_fuzz_corpus_reader_returns_sentences_or_our_error(tmp_path, data):
    path = tmp_path / "corpus.txt"
    path.write_bytes(data)
    try:
        sentences, blank = read_corpus(path, Tokenizer())
    except InputError:
        return
    assert sentences and all(sentence for sentence in sentences) and blank >= 0


def test_an_empty_stream_is_named_as_the_user_gave_it_not_by_its_copy(tmp_path):
    result = invoke("train", "--config", ROOT / "configs" / "tiny.toml", "--train", "/dev/null", "--out",
                    tmp_path / "r", "--quiet")
    message = one_line_error(result, "/dev/null: no sentences")
    assert ".stream-" not in message
