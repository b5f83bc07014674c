"""Files of predicted trees, as `evaluate --pred` reads them: bracketed trees (a tree a line, or spread over lines
as .mrg files write them), json (nested lists) or jsonl (`parse --format jsonl`'s records); and one predicted tree
put onto its gold tree's words (tokens the gold trees lack, punctuation and traces, left out; another tokenization
of a gold word joined)."""

from __future__ import annotations

import json
from pathlib import Path

from .. import trees
from ..errors import InputError
from ..files import read_lines
from ..messages import plural
from .tokenizer import Tokenizer
from .treebank import GoldTree, TagFilter, parse_bracketed, preprocess, split_trees

PRED_FORMATS = ("brackets", "ptb", "json", "jsonl")  # what `parse --format` writes that can be scored


def predicted_trees(path: Path, fmt: str | None) -> list[tuple[int, object]]:
    """(line number, tree text or object, "" for none) of each sentence of a file of predicted trees."""
    lines = list(read_lines(path))
    first = next((text.strip() for _, text in lines if text.strip()), "(")
    fmt = fmt or {"{": "jsonl", "[": "json", '"': "json"}.get(first[:1], "brackets")
    if fmt in ("json", "jsonl"):
        return [(n, _json_tree(path, n, text, fmt)) for n, text in lines]
    stray = next((n for n, text in lines if not text.lstrip().startswith("(") and len(text.split()) > 1), None)
    if stray is not None:  # (a tree of one word is the word alone)
        raise InputError(f"{path}:{stray}: not a file of bracketed trees (--pred-format takes {', '.join(PRED_FORMATS)}: "
                         "what parse writes with --format; ascii drawings and pictures cannot be scored)")
    if all(text.count("(") == text.count(")") for _, text in lines):
        return lines  # a tree a line, as parse writes them: blank lines kept
    return [(int(source.rsplit(":", 1)[1]), text) for source, text in split_trees(path)]


def _json_tree(path: Path, lineno: int, text: str, fmt: str) -> object:
    if not text.strip():
        return ""
    try:
        value = json.loads(text)
        tree = value["tree"] if fmt == "jsonl" else value
        if not (tree is None or isinstance(tree, (str, list))):  # a jsonl record read as json, say
            raise TypeError
    except (ValueError, KeyError, TypeError):
        other = "; this is a jsonl record: --pred-format jsonl" if fmt == "json" and text.lstrip()[:1] == "{" else ""
        raise InputError(f"{path}:{lineno}: not a {fmt} line of parse's output (expected "
                         + ('{"tree": ...}' if fmt == "jsonl" else "a tree as nested lists") + f"{other})") from None
    return "" if tree is None else tree


def on_gold(path: Path, lines: list[tuple[int, object]], gold: list[GoldTree], skipped, max_length: int,
            labeled: bool, tags: TagFilter) -> tuple[list[GoldTree], list[trees.Tree], list[tuple[str, str]]]:
    """Predicted trees ((line number, tree) pairs, one per gold tree or per gold tree within `max_length`, and
    perhaps one per skipped gold tree too) put onto their gold trees' words: the gold trees within `max_length`,
    their predicted trees, and (file:line, token) of every predicted token the gold trees lack, left out."""
    short = [g for g in gold if g.within(max_length)]
    lines = _without_skipped(lines, gold, skipped, path)
    if len(lines) not in (len(gold), len(short)):
        within = f" ({len(short)} of at most {max_length} words)" if max_length else ""
        raise InputError(f"{path}: {plural(len(lines), 'predicted tree')} for {plural(len(gold), 'gold tree')}{within}")
    aligned = gold if len(lines) == len(gold) else short
    dropped: list[tuple[str, str]] = []
    predicted = [onto_gold(path, n, text, g, labeled, tags, dropped) for (n, text), g in zip(lines, aligned)]
    keep = [k for k, g in enumerate(aligned) if g.within(max_length)]
    return [aligned[k] for k in keep], [predicted[k] for k in keep], dropped


def _without_skipped(lines: list[tuple[int, object]], gold: list[GoldTree], skipped, path: Path) -> list:
    """The predictions without those of skipped gold trees, where there is one per gold tree of the file (the
    blank line `parse` writes for a sentence of traces only, say): a prediction with words there is refused."""
    if not skipped or len(lines) != len(gold) + skipped:
        return lines
    positions = {position for position, _, _ in skipped.trees}
    for k, (n, text) in enumerate(lines):
        if k in positions and text not in ("", None) and (not isinstance(text, str) or text.strip()):
            where = next(w for p, w, _ in skipped.trees if p == k)
            raise InputError(f"{path}:{n}: a tree for the gold tree at {where}, which is skipped (it has no words)")
    return [line for k, line in enumerate(lines) if k not in positions]


def onto_gold(path: Path, lineno: int, text: object, gold: GoldTree, labeled: bool, tags: TagFilter,
                    dropped: list[tuple[str, str]]) -> trees.Tree:
    """One predicted tree over the gold tree's words. A labelled tree (`(S (NP (DT the) ...`, recognised
    without --pred-format ptb) is filtered with the gold trees' tag filter, and from any tree the tokens the
    gold trees do not have (punctuation, traces, as `parse` prints them) are dropped: both sides alike,
    each listed in `dropped`; a dropped token that is a word is refused, unless the gold tree has it among the
    leaves its tag filter left out (`$`, `#`, a closing `'`: words to a model, punctuation to the protocol)."""
    source = f"{path}:{lineno}"
    readings = [(True, tags), (True, TagFilter(keep=None))] if labeled else [(False, None), (True, tags),
                                                                             (True, TagFilter(keep=None))]
    first, extra_words = None, None
    left_out = {trees.unescape(word) for word in gold.dropped}
    for as_labeled, tag_filter in readings:
        try:
            tree = _read_tree(text, source, as_labeled, tag_filter)
        except InputError:
            if as_labeled == labeled:
                raise
            continue
        first = tree if first is None else first
        if (found := _onto_gold_words(tree, gold)) is not None:
            onto, extra = found
            if words := [t for t in extra if WORDS.is_word(t) and t not in ("-NONE-",) and not t.startswith("*")
                         and trees.unescape(t) not in left_out]:
                extra_words = extra_words or words  # perhaps labels read as words: try the next reading
                continue
            dropped += [(source, t) for t in extra]
            return onto
    if extra_words:
        raise InputError(f"{source}: {plural(len(extra_words), 'word')} the gold tree at {gold.source} does not "
                         f"have: {' '.join(extra_words[:5])} (only punctuation and traces may differ)")
    words = trees.leaves(first) if first is not None else []
    hint = "" if labeled else " (for labelled trees, add --pred-format ptb)"
    raise InputError(f"{source}: the words ({len(words)}) differ from the gold tree at {gold.source} "
                     f"({len(gold.words)}): {' '.join(words[:8])} ... vs {' '.join(gold.words[:8])} ...{hint}")


WORDS = Tokenizer("treebank")  # which tokens are words (not punctuation) when predicted tokens differ from gold


def _read_tree(text: object, source: str, labeled: bool, tags: TagFilter | None) -> trees.Tree | None:
    """A tree from its bracket text, or from a tree object (an nltk.Tree) without a round trip through text."""
    try:
        if labeled:
            if not isinstance(text, str) and not hasattr(text, "label"):  # nested lists (json) carry no labels
                raise InputError(f"{source}: not a labelled tree")
            return preprocess(parse_bracketed(text, source) if isinstance(text, str) else text, tags, source)
        return trees.parse_brackets(text) if isinstance(text, str) else trees.from_nested(text)
    except trees.TreeSyntaxError as e:
        raise InputError(f"{source}: malformed tree ({e})") from None


def _onto_gold_words(tree: trees.Tree | None, gold: GoldTree) -> tuple[trees.Tree, list[str]] | None:
    """The tree over the gold words, and the tokens it left out: leaves that are not gold words are dropped
    (the gold words must be its leaves in order, up to case, digits and bracket names; matched left to
    right); leaves that together spell one gold word (`U.S` `.`, `Got` `ta`: another tokenization of it)
    become that word; emptied nodes are dropped and unary nodes collapsed. None if the gold words are not
    among its leaves."""
    if tree is None:
        return None
    normalize = Tokenizer(lowercase=True, replace_digits=True).normalize
    wanted = [normalize(trees.unescape(w)) for w in gold.words]
    leaves = trees.leaves(tree)
    read = [normalize(trees.unescape(w)) for w in leaves]
    kept: list[str | None] = []  # per leaf: what it becomes, or None (left out)
    extra: list[str] = []
    j = k = 0
    while k < len(leaves):
        if j < len(wanted) and read[k] == wanted[j]:
            kept.append(leaves[k])
        elif j < len(wanted) and (pieces := _pieces(read, k, wanted[j])):
            kept += [gold.words[j]] + [None] * (pieces - 1)
            k, j = k + pieces, j + 1
            continue
        else:
            kept.append(None)
            extra.append(leaves[k])
            k += 1
            continue
        k, j = k + 1, j + 1
    if j < len(wanted):
        return None
    if all(word == leaf for word, leaf in zip(kept, leaves)):
        return tree, extra

    def pruned(children: list) -> trees.Tree | None:  # a node without its dropped leaves (no recursion: deep trees)
        children = [c for c in children if c is not None]
        return None if not children else children[0] if len(children) == 1 else children

    return trees.rebuild(tree, pruned, lambda word, k: kept[k]), extra


def _pieces(read: list[str], k: int, word: str) -> int:
    """How many leaves from k on spell `word` together (0 if they do not)."""
    joined, m = "", k
    while m < len(read) and len(joined) < len(word) and word.startswith(joined + read[m]):
        joined += read[m]
        m += 1
    return m - k if joined == word and m - k > 1 else 0
