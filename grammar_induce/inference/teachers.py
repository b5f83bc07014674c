"""A focused run's model teachers' trees of its training text, made before the run by the parse path users run (the
API's parser, handed in as a `TreeMaker`) and kept as a file of trees, aligned with the training file's lines, in the
token cache: focusing (families/focus.py) reads it as it reads any file of trees. The trees are made in chunks, each
kept as it is made, so a stopped run parses on from its last; a chunk that does not read is made again, with a note.
(Here, beside the loop, rather than in workflows/: `train` uses it, and no workflow imports another.)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config import Config
from ..errors import InputError
from ..families.focus import trained
from ..files import read_lines, write_text
from ..messages import Messages, plural
from ..text import aligned, corpus
from ..trees import Tree, to_brackets

CHUNK = 2000  # sentences a model teacher parses between two saved chunks of its trees
TREES = "trees.txt"  # a teacher's trees, aligned with the training file's lines (written from the chunks)


@dataclass(frozen=True)
class TreeMaker:
    """A focusing teacher that is a model (a shipped name, a checkpoint): its family (its model kind), what it is
    (its files' hash: the cache of its trees is its own) and how it parses sentences given as words."""

    family: str
    identity: str
    parse: Callable[[list[list[str]]], list[Tree]]


def trees_file(name: str, maker: TreeMaker, config: Config, lines: list[tuple[int, list[str]]],
               messages: Messages) -> Path:
    """The file of `maker`'s trees of the training text (`lines`: as `corpus.training_lines` reads it; a blank line
    where a line has no words or a sentence is outside 2 to max_length words: never trained on), written from its
    chunks in the cache, those it lacks (or that do not read) made first."""
    data = config.data
    key = hashlib.blake2b(json.dumps([maker.identity, corpus.file_hash(Path(data.train)),
                                      corpus.training_reader(data).to_dict(), config.train.max_length]).encode(),
                          digest_size=12).hexdigest()
    folder = corpus.cache_root(data.cache_dir) / "focus" / key
    sentences = [words for _, words in lines if words]
    keep = trained(sentences, config.train.max_length)
    made = iter(_chunked_trees(name, maker, sentences, keep, folder, config.train.max_length, messages))
    rows = []
    for _, words in lines:
        tree = next(made) if words else None
        rows.append(("" if tree is None else to_brackets(tree)) + "\n")
    write_text(folder / TREES, "".join(rows))
    return folder / TREES


def _chunked_trees(name: str, maker: TreeMaker, sentences: list[list[str]], keep: list[bool], folder: Path,
                   longest: int, messages: Messages) -> list[Tree | None]:
    """A model teacher's trees of the kept sentences (None for the others), from its chunks in `folder`, parsing
    the chunks it lacks (each saved as it is made)."""
    folder.mkdir(parents=True, exist_ok=True)
    chunks = [(range(first, min(first + CHUNK, len(sentences))), folder / f"trees-{first // CHUNK:05d}.txt")
              for first in range(0, len(sentences), CHUNK)]
    missing = sum(not path.exists() for _, path in chunks)
    if missing:
        messages.say(f"focus: {name} parses {plural(sum(keep), 'training sentence')} of 2 to {longest} words, "
                     f"{plural(missing, 'chunk')} to go, each kept in {folder} as it is made (a stopped run goes on "
                     "from the last)")
    found: list[Tree | None] = []
    for rows, path in chunks:
        kept = _read_chunk(path, len(rows), messages) if path.exists() else None
        if kept is None:
            wanted = [k for k in rows if keep[k]]
            made = dict(zip(wanted, maker.parse([sentences[k] for k in wanted])))
            write_text(path, "".join((to_brackets(made[k]) if k in made else "") + "\n" for k in rows))
            kept = [made.get(k) for k in rows]
        found.extend(kept)
    return found


def _read_chunk(path: Path, rows: int, messages: Messages) -> list[Tree | None] | None:
    """A cached chunk's trees, or None (with a note naming it) where it does not read whole: it is made again."""
    try:
        kept = [aligned.parse_tree_line(text, f"{path}:{n}") for n, text in read_lines(path)]
    except InputError as e:
        kept, why = None, str(e)
    else:
        why = f"{len(kept):,} lines where the chunk has {rows:,} sentences"
    if kept is not None and len(kept) == rows:
        return kept
    messages.note(f"focus: the cached chunk {path} does not read ({why}): made again")
    return None
