import pytest
import torch

from grammar_induce.files import InputError
from grammar_induce.text import corpus
from grammar_induce.text.tokenizer import EOS, Tokenizer, build_vocab, encode_stream, read_corpus

from .conftest import ROOT
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
