"""Lines of text to results: each line tokenized (the words the models read, the punctuation set aside, where its
sentences start), its sentences run through the member path (members.py) and put back together with their
punctuation, a line's sentences joined under one node. What every executor runs on a chunk of lines
(`parse_chunk`), in this process, in worker processes or under torchrun (executors.py); and the lines themselves, in
chunks (`chunks_of`), from a stream as they come (`live_lines`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

from .. import trees
from ..families.checkpoint import LoadedModel
from ..files import read_lines
from ..output.formats import MemberResult, SentenceResult
from ..text.tokenizer import sentence_starts
from .ensemble import ParseOptions
from .members import Members, chunk_lines

Line = tuple[list[str], list[bool], list[int]]  # a line's tokens, which of them the models read, where sentences start


def parse_sentences(members: Members, sentences: list[list[str]], all_layers: bool = False) -> list[SentenceResult]:
    """Each sentence's combined tree and every member's distances and tree (the members' layers fixed)."""
    parsed = next(members.parse(sentences, all_layers, at_once=True), None)
    if parsed is None:  # no sentences
        return []
    readings, combined = parsed.readings, iter(parsed.trees)
    layers, o = members.options.layers, members.options
    results = []
    for k, words in enumerate(sentences):
        if not words:
            results.append(SentenceResult(words, None))
            continue
        own = readings[0][k].labels if o.labels and len(readings) == 1 else None
        results.append(SentenceResult(words, next(combined), labels=own, members=[
            MemberResult(p.direction, p.to_dict(), p.tree(layer, o.distance, o.decoder), m.source, layer,
                         p.gaps(layer, o.distance), p.heads)
            for p, layer, m in zip([member[k] for member in readings], layers, members.models)]))
    return results


def parse_chunk(members: Members, chunk: list[Line], all_layers: bool) -> list[SentenceResult]:
    """One chunk of tokenized lines parsed, a sentence at a time, with its punctuation put back; a line of several
    sentences gets a tree whose top joins theirs."""
    pieces = [_sentences_of(line) for line in chunk]
    flat = [piece for line in pieces for piece in line]
    results = parse_sentences(members, words_of(flat), all_layers)
    normalize = members.models[0].tokenizer.normalize
    done = iter(replace(_with_punctuation(r, tokens, is_word), read=[normalize(w) for w in r.words])
                for r, (tokens, is_word, _) in zip(results, flat))
    return [joined([next(done) for _ in line]) for line in pieces]


def _sentences_of(line: Line) -> list[Line]:
    tokens, is_word, starts = line
    bounds = [0, *starts, len(tokens)]
    return [(tokens[a:b], is_word[a:b], []) for a, b in itertools.pairwise(bounds)]


def joined(results: list[SentenceResult]) -> SentenceResult:
    """The results of a line's sentences as the line's: the words and tokens one after another, the tree a node over
    the sentences' trees (each member's too), the distances and labels shifted along."""
    if len(results) == 1:
        return results[0]
    offsets = list(itertools.accumulate((len(r.words) for r in results[:-1]), initial=0))
    labels = {(i + at, j + at): x for r, at in zip(results, offsets) for (i, j), x in (r.labels or {}).items()}
    members = [MemberResult(parts[0].direction,
                            {kind: [_chained(rows) for rows in zip(*(p.values[kind] for p in parts))]
                             for kind in parts[0].values},
                            [p.tree for p in parts], parts[0].source, parts[0].layer,
                            [g for k, p in enumerate(parts) for g in ([math.inf] if k else []) + p.gaps],
                            None if parts[0].heads is None else
                            [h + at if h else 0 for p, at in zip(parts, offsets) for h in p.heads])
               for parts in zip(*(r.members for r in results))]
    return SentenceResult(_chained(r.words for r in results), [r.tree for r in results], members,
                          _chained(r.tokens or r.words for r in results),
                          _chained(r.is_word or [True] * len(r.words) for r in results),
                          _chained(r.read or r.words for r in results), labels if results[0].labels is not None else None)


def _chained(lists: Iterable[list]) -> list:
    return list(itertools.chain.from_iterable(lists))


def tokens_of(model: LoadedModel, line: str | Sequence[str], options: ParseOptions) -> Line:
    """A line's tokens, which of them the models read, and where its sentences start (a line of text, unless
    `options.whole_lines`: lines of tokens are taken as one sentence)."""
    if not isinstance(line, str):
        return (*model.tokenizer.read_tokens(list(line)), [])
    tokens, is_word = (model.tokenizer.read_tokens(line.split()) if options.pretokenized
                       else model.tokenizer.read(line, model.vocab.index))
    return tokens, is_word, [] if options.whole_lines or options.pretokenized else sentence_starts(tokens)


def words_of(chunk: list[Line]) -> list[list[str]]:
    return [[t for t, word in zip(tokens, is_word) if word] for tokens, is_word, _ in chunk]

def _with_punctuation(result: SentenceResult, tokens: list[str], is_word: list[bool]) -> SentenceResult:
    """The result with the punctuation the models did not read put back into its tree."""
    if all(is_word):
        return result
    return replace(result, tree=trees.restore_tokens(result.tree, tokens, is_word), tokens=tokens, is_word=is_word)


PAUSE = object()  # in the lines to parse: nothing more has come for a moment (parse what has)


def chunks_of(lines: Iterable[str], batch_size: int, stream: bool) -> Iterator[list[str]]:
    """Lines in chunks of 64 batches: sorting by length inside a chunk keeps batches full. A stream (a
    pipe, a terminal, a generator) goes a batch at a time, and a PAUSE in it parses what has come, so
    trees appear as the lines do."""
    size = batch_size if stream else chunk_lines(batch_size)  # as the member path reads them
    chunk: list[str] = []
    for line in lines:
        if line is PAUSE:
            if chunk:
                yield chunk
                chunk = []
            continue
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def live_lines(stream) -> Iterator[object]:
    """The stream's lines (a pipe, a terminal) as they come, read in a thread; PAUSE whenever none has come for a
    moment, so that `parse` parses what has come."""
    import queue
    import threading

    lines: queue.Queue = queue.Queue(maxsize=4096)
    end = object()

    def read() -> None:
        try:
            for _, text in read_lines(stream):
                lines.put(text)
        except BaseException as e:  # noqa: BLE001 - handed to the reading side, which raises it
            lines.put(e)
        lines.put(end)

    threading.Thread(target=read, daemon=True).start()
    while True:
        try:
            item = lines.get(timeout=0.2)
        except queue.Empty:
            yield PAUSE
            item = lines.get()
        if item is end:
            return
        if isinstance(item, BaseException):
            raise item
        yield item
