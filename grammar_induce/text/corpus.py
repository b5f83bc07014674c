"""Tokenized corpora on disk: a text file is tokenized once, in a streaming pass, into a cache of
token ids that every later run (and every process of a distributed run) memory-maps.

An entry is a folder named by a key: the hash of the file's content and of the settings that
change its ids (tokenizer kind, lowercase, replace_digits, the vocabulary limits, and for a
validation or test file the vocabulary it is encoded with). It holds `ids.bin`, the `<eos>`-
separated id stream in the smallest unsigned type that fits the vocabulary, and `meta.json`
(counts, the vocabulary of a training file). An entry that does not match its description
(truncated, foreign, ids out of range) is rebuilt, never trusted.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import hashlib
import itertools
import json
import os
import shutil
import stat
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..errors import InputError
from ..files import read_lines, remove_stale
from ..messages import plural
from .tokenizer import EOS, UNK, Tokenizer, Vocab, tokenizer_of

if TYPE_CHECKING:
    from ..config import Config, DataConfig

FORMAT = 1
CACHE_ENV = "GRAMMAR_INDUCE_CACHE"
CHUNK_LINES = 4096  # lines per tokenizing task (and per write of ids)


@dataclass(frozen=True)
class Limits:
    max_vocab: int = 0
    min_freq: int = 1


@dataclass
class Entry:
    """A cached, memory-mapped corpus file."""

    path: Path  # the entry's folder
    ids: torch.Tensor  # (N,) memory-mapped ids, <eos> after every sentence
    sentences: int
    blank_lines: int
    vocab: Vocab | None  # a training file's own vocabulary
    counts: dict[str, int]  # word counts of a training file (for `prepare`'s report)

    @property
    def size_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.path.iterdir())


def training_reader(data: DataConfig) -> Tokenizer:
    """How a run reads its training, validation and test files: the config's tokenizer, with its
    lowercasing and digit mapping only when data.normalize_training_text (the PTB LM text is read as it is)."""
    return tokenizer_of(data, normalize=data.normalize_training_text)


def training_lines(data: DataConfig) -> list[tuple[int, list[str]]]:
    """(line number, words) of every line of the training file, as training reads them (a blank line: no words)."""
    reader = training_reader(data)
    return [(n, reader(text)) for n, text in read_lines(data.train)]


def prepare(config: Config, path: str) -> str:
    """Build (or find) the token cache of a training file with the config's text settings; returns
    what it holds, in a few lines (`grammar-induce prepare`)."""
    data = config.data
    began = time.time()
    root = cache_root(data.cache_dir)
    with read_once([path], root) as readable:
        entry = training_entry(readable[path], training_reader(data), Limits(data.max_vocab, data.min_freq), root,
                               data.workers or os.cpu_count() or 1, config.model.reading_order == "backward")
    words = sum(entry.counts.values())
    covered = sum(entry.counts.get(word, 0) for word in entry.vocab.words)
    return (f"{path}: {plural(entry.ids.numel() - entry.sentences, 'token')} in {plural(entry.sentences, 'sentence')} "
            f"({plural(entry.blank_lines, 'blank line')} skipped), {plural(len(entry.counts) - 2, 'word type')}\n"
            f"vocabulary {len(entry.vocab):,} (max_vocab {data.max_vocab or 'none'}, min_freq {data.min_freq}): "
            f"covers {100 * covered / max(words, 1):.2f}% of the tokens\n"
            f"cache {entry.path} ({entry.size_bytes / 2**20:.1f} MB), ready in {time.time() - began:.1f} s")


@contextlib.contextmanager
def read_once(paths: Iterable[str], root: Path) -> Iterator[dict[str, str]]:
    """Each path, or for one that cannot be read twice (a pipe, `<(cat f)`), a temporary copy in the cache
    folder: an entry's key hashes a file before it is tokenized. The copies go when the block ends."""
    copies: dict[str, str] = {}
    try:
        for path in paths:
            if path and path not in copies and is_stream(path):
                copies[path] = _copy_stream(path, root)
        yield {path: copies.get(path, path) for path in paths}
    except InputError as e:  # a message names the copy: name what the user gave (/dev/null, /dev/fd/63)
        message = str(e)
        for path, copy in copies.items():
            message = message.replace(copy, path)
        if message == str(e):
            raise
        raise InputError(message) from None
    finally:
        for copy in copies.values():
            Path(copy).unlink(missing_ok=True)


def is_stream(path: str) -> bool:
    try:
        return not stat.S_ISREG(os.stat(path).st_mode) and not Path(path).is_dir()
    except OSError:
        return False


def _copy_stream(path: str, root: Path) -> str:
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, copy = tempfile.mkstemp(dir=root, prefix=f".stream-{os.getpid()}-")
    except OSError as e:
        raise InputError(f"{root}: cannot write the corpus cache ({e.strerror}); set {CACHE_ENV} or data.cache_dir") from None
    try:
        with open(path, "rb") as source, os.fdopen(fd, "wb") as target:
            shutil.copyfileobj(source, target, 1 << 22)
    except OSError as e:
        Path(copy).unlink(missing_ok=True)
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    except BaseException:
        Path(copy).unlink(missing_ok=True)
        raise
    return copy


def cache_root(configured: str = "") -> Path:
    """The cache folder: data.cache_dir, else $GRAMMAR_INDUCE_CACHE, else ~/.cache/grammar-induce/corpora."""
    if configured:
        return Path(configured).expanduser()
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "grammar-induce" / "corpora"


def training_entry(path: str, tokenizer: Tokenizer, limits: Limits, root: Path, workers: int = 1,
                   backward: bool = False) -> Entry:
    """The cached ids of a training file under its own vocabulary, built on first use; `backward`:
    each sentence's words reversed (a backward model's stream)."""
    key = _key(path, tokenizer, {"limits": [limits.max_vocab, limits.min_freq], "backward": backward})
    return _load(root / key, key) or _build(path, tokenizer, root, key, workers, backward, limits=limits)


def encoded_entry(path: str, tokenizer: Tokenizer, vocab: Vocab, root: Path, workers: int = 1,
                  backward: bool = False) -> Entry:
    """The cached ids of a validation or test file under a given vocabulary, built on first use."""
    vocab_hash = hashlib.sha256("\n".join(vocab.words).encode()).hexdigest()
    key = _key(path, tokenizer, {"vocab": vocab_hash, "backward": backward})
    return _load(root / key, key) or _build(path, tokenizer, root, key, workers, backward, vocab=vocab)


def require_training_file(data: DataConfig) -> None:
    if not data.train:
        raise InputError("no training file: give --train FILE or set data.train in the config")


def training_files(config: Config, vocab: Vocab | None = None) -> tuple[Vocab, dict[str, Entry]]:
    """The config's training file and its held-out ones (data.valid, .test) through the token cache, each built on
    first use, by path; the vocabulary from the training file unless given (on resume: the run's, the file encoded
    with it if the file or the limits changed)."""
    data = config.data
    require_training_file(data)
    reader = training_reader(data)
    root, workers = cache_root(data.cache_dir), data.workers or os.cpu_count() or 1
    backward = config.model.reading_order == "backward"
    with read_once([data.train, data.valid, data.test], root) as readable:
        train = training_entry(readable[data.train], reader, Limits(data.max_vocab, data.min_freq), root, workers,
                               backward)
        if vocab is not None and vocab.words != train.vocab.words:
            train = encoded_entry(readable[data.train], reader, vocab, root, workers, backward)
        vocab = vocab or train.vocab
        entries = {data.train: train}
        for path in (data.valid, data.test):
            if path and path not in entries:
                entries[path] = encoded_entry(readable[path], reader, vocab, root, workers, backward)
    return vocab, entries


def _key(path: str, tokenizer: Tokenizer, extra: dict) -> str:
    digest = hashlib.blake2b(digest_size=20)
    try:
        with open(path, "rb") as f:
            while block := f.read(1 << 22):
                digest.update(block)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    digest.update(json.dumps({"format": FORMAT, "tokenizer": tokenizer.to_dict(), **extra}, sort_keys=True).encode())
    return digest.hexdigest()


def _load(folder: Path, key: str) -> Entry | None:
    """The entry in `folder` if it is whole and what its key says; None otherwise."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
        if meta.get("format") != FORMAT or meta.get("key") != key:
            return None
        dtype = {"uint16": torch.uint16, "int32": torch.int32}[meta["dtype"]]
        n, limit = int(meta["tokens"]), int(meta["id_limit"])
        if (folder / "ids.bin").stat().st_size != n * dtype.itemsize or n < 1:
            return None
        if file_hash(folder / "ids.bin") != meta["ids_hash"]:  # zeroed, overwritten: not what was written
            return None
        ids = torch.from_file(str(folder / "ids.bin"), shared=False, size=n, dtype=dtype)
        if _largest(ids) >= limit:
            return None
        if meta.get("vocab") and _words_hash(meta["vocab"]) != meta["vocab_hash"]:
            return None
        vocab = Vocab(meta["vocab"]) if meta.get("vocab") else None
        return Entry(folder, ids, int(meta["sentences"]), int(meta["blank_lines"]), vocab, meta.get("counts", {}))
    except (OSError, ValueError, KeyError, TypeError, RuntimeError):
        return None


def file_hash(path: Path) -> str:
    digest = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def _words_hash(words: list[str]) -> str:
    return hashlib.blake2b("\n".join(words).encode(), digest_size=20).hexdigest()


def _largest(ids: torch.Tensor) -> int:
    step = 1 << 24
    return max(int(ids[k : k + step].to(torch.int32).max()) for k in range(0, ids.numel(), step))


def _build(path: str, tokenizer: Tokenizer, root: Path, key: str, workers: int, backward: bool, *,
           limits: Limits | None = None, vocab: Vocab | None = None) -> Entry:
    """Tokenize once into provisional ids (first-seen order, uint32) with their counts, then map
    them to final ids, in chunks: memory holds the vocabulary, never the corpus."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        remove_stale(root, ".build-", "-[A-Za-z0-9_]+")  # what a killed build left
        work = Path(tempfile.mkdtemp(dir=root, prefix=f".build-{os.getpid()}-"))
    except OSError as e:
        raise InputError(f"{root}: cannot write the corpus cache ({e.strerror}); set {CACHE_ENV} or data.cache_dir") from None
    try:
        words, counts, sentences, blank = _provisional_ids(path, tokenizer, work / "provisional.bin", workers,
                                                           backward)
        if not sentences:
            raise InputError(f"{path}: no sentences (the file is empty or has only blank lines)")
        own = vocab is None  # a training file's vocabulary is its own, kept in the entry
        if own:
            vocab = Vocab.build(Counter(dict(zip(words, counts))), limits.max_vocab, limits.min_freq)
        table = [vocab.index.get(word, 0) for word in words]
        dtype = "uint16" if len(vocab) <= 1 << 16 else "int32"
        tokens = _remap(work / "provisional.bin", work / "ids.bin", table, dtype)
        meta = {"format": FORMAT, "key": key, "source": str(Path(path).resolve()), "dtype": dtype, "tokens": tokens,
                "id_limit": len(vocab), "sentences": sentences, "blank_lines": blank,
                "vocab": vocab.words if own else None, "counts": dict(zip(words, counts)) if own else {},
                "ids_hash": file_hash(work / "ids.bin"), "vocab_hash": _words_hash(vocab.words) if own else None}
        (work / "provisional.bin").unlink()
        (work / "meta.json").write_text(json.dumps(meta, ensure_ascii=False))
        if (root / key).exists() and _load(root / key, key) is None:
            shutil.rmtree(root / key, ignore_errors=True)  # a damaged entry: replaced
        try:
            os.replace(work, root / key)
        except OSError:  # another process built it first: keep theirs
            pass
    except OSError as e:  # a full disk or a quota: nothing of the build is kept
        raise InputError(f"{root}: cannot write the corpus cache ({e.strerror or e}); free space, or set {CACHE_ENV} "
                         "or data.cache_dir") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    entry = _load(root / key, key)
    if entry is None:
        raise InputError(f"{root / key}: the corpus cache could not be written whole")
    return entry


def _provisional_ids(path: str, tokenizer: Tokenizer, out: Path, workers: int, backward: bool):
    """Write the stream of provisional ids (ids 0 and 1 are <unk> and <eos>); returns the words in id order,
    their counts, the number of sentences and of blank lines."""
    index = {UNK: 0, EOS: 1}
    words, counts = [UNK, EOS], [0, 0]
    sentences = blank = 0
    with open(out, "wb") as f:
        for chunk in _tokenized_chunks(path, tokenizer, workers):
            ids = array.array("I")
            for sentence in chunk:
                if not sentence:
                    blank += 1
                    continue
                sentences += 1
                for word in reversed(sentence) if backward else sentence:
                    k = index.get(word)
                    if k is None:
                        k = index[word] = len(words)
                        words.append(word)
                        counts.append(0)
                    counts[k] += 1
                    ids.append(k)
                ids.append(1)
            f.write(ids.tobytes())
    counts[1] = 0  # the <eos> after each sentence is not a word of the text
    return words, counts, sentences, blank


def _tokenized_chunks(path: str, tokenizer: Tokenizer, workers: int) -> Iterator[list[list[str]]]:
    """The file's lines as word lists, a chunk at a time, in order; jieba runs in `workers` processes."""
    chunks = _line_chunks(path)
    if workers <= 1 or tokenizer.kind != "jieba":
        yield from ([tokenizer(line) for line in chunk] for chunk in chunks)
        return
    with get_context("spawn").Pool(workers) as pool:
        yield from pool.imap(_tokenize_chunk, ((tokenizer, chunk) for chunk in chunks))


def _tokenize_chunk(task: tuple[Tokenizer, list[str]]) -> list[list[str]]:
    tokenizer, lines = task
    return [tokenizer(line) for line in lines]


def _line_chunks(path: str) -> Iterator[list[str]]:
    lines = (line for _, line in read_lines(path))
    while chunk := list(itertools.islice(lines, CHUNK_LINES)):
        yield chunk


def _remap(source: Path, target: Path, table: list[int], dtype: str) -> int:
    """Map provisional ids to final ones a block at a time, read and written as plain file I/O (memory
    stays at a block, where mapping both files would count them in the resident size); returns the count."""
    lookup = torch.tensor(table, dtype=torch.int32)
    out_dtype = {"uint16": torch.uint16, "int32": torch.int32}[dtype]
    total = 0
    with open(source, "rb") as src, open(target, "wb") as dst:
        while block := src.read(4 << 22):
            ids = lookup[torch.frombuffer(bytearray(block), dtype=torch.int32).long()].to(out_dtype)
            dst.write(ctypes.string_at(ids.data_ptr(), ids.numel() * ids.element_size()))
            total += ids.numel()
    return total
