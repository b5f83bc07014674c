"""Parses drawn: `--format html` (one page of every sentence) and `--format svg` (one sentence, or a file per line in
a folder), each member's distances as bars under the words, and dependency heads as arcs under them where a member
has them (draw.py draws them)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from .. import trees
from ..errors import InputError
from ..files import replace_folder, write_text
from ..trees import Tree
from . import draw
from .formats import MemberResult, SentenceResult

PICTURE_FILE = re.compile(r"\d{6}\.svg")  # the files of a folder of pictures, one per line


def draw_pictures(results: Iterable[SentenceResult], fmt: str, output: Path | None,
                  distance: str | None = None) -> Iterator[str]:
    """`--format html`: one page of every sentence; `--format svg`: one SVG of one sentence (to stdout
    or to a FILE.svg), or one per line, numbered, in the folder `output` (written whole, then put in
    place of the folder's earlier pictures). Each member's bars are its `distance` ones, its own layer
    marked. Yields what goes to stdout."""
    if fmt == "html":
        page = draw.parse_page(_drawn(r, distance) for r in results if r.tree is not None)
        if output is None:
            yield page
        else:
            write_text(output, page)
        return
    if one_file(output):
        svg = _one_picture(results, distance)
        if output is None:
            yield svg
        else:
            write_text(output, svg)
        return
    replace_folder(output, lambda folder: _write_pictures(results, distance, folder))


def one_file(output: Path | None) -> bool:
    """Whether `--format svg` writes one picture (to stdout, a FILE.svg, or a file or device that is there:
    /dev/stdout) rather than a folder of them."""
    return output is None or output.suffix == ".svg" or (output.exists() and not output.is_dir())


def _one_picture(results: Iterable[SentenceResult], distance: str | None) -> str:
    """The SVG of the only sentence: a second one is refused before anything is written."""
    results = iter(results)
    first = next(results, None)
    if next(results, None) is not None:
        raise InputError("--format svg draws one sentence to stdout or to FILE.svg; for several give "
                         "--output DIR (a file per line) or use --format html")
    return "" if first is None or first.tree is None else _sentence_svg(first, distance)


def _write_pictures(results: Iterable[SentenceResult], distance: str | None, folder: Path) -> None:
    for number, result in enumerate(results, start=1):
        if result.tree is not None:
            (folder / f"{number:06d}.svg").write_text(_sentence_svg(result, distance), encoding="utf-8")


def _sentence_svg(result: SentenceResult, distance: str | None) -> str:
    tokens, tree, members, heads, confidence = _drawn(result, distance)
    caption = "confidence: shade and number (0 white, 1 dark blue)" if confidence else ""
    if len(members) == 1:
        _, _, rows, layer = members[0]
        return draw.tree_svg(tokens, tree, rows, layer, heads=heads, confidence=confidence, caption=caption)
    return draw.tree_svg(tokens, tree, heads=heads, confidence=confidence, caption=caption)


Member = tuple[str, Tree, list[list[float | None]], int]  # name, tree, distances per layer, the layer read


Drawn = tuple[list[str], Tree, list[Member], list[tuple[int, str]], dict[tuple[int, int], float]]


def _drawn(result: SentenceResult, distance: str | None) -> Drawn:
    """What a picture shows: every token, the tree, each member as (name, tree, its `distance`
    distances per layer, its layer), the members' trees and distances spread over every token (no bar
    under punctuation), each token's dependency head where a member has them (SentenceResult.token_heads), and each
    node's confidence by the tokens it covers (where asked for)."""
    heads = result.token_heads() if result.heads is not None else []
    confidence = _token_confidence(result)
    if result.tokens is None:
        return result.words, result.tree, [(_member_name(m), m.tree, m.distances(distance), m.layer)
                                            for m in result.members], heads, confidence
    return result.tokens, result.tree, [
        (_member_name(m), trees.restore_tokens(m.tree, result.tokens, result.is_word),
         [result.token_row(row) for row in m.distances(distance)], m.layer) for m in result.members], heads, confidence


def _token_confidence(result: SentenceResult) -> dict[tuple[int, int], float]:
    """Each node's confidence (given by the words it covers) by the tokens it covers, as the picture lays it out."""
    if not result.confidence:
        return {}
    spans: list[tuple[int, int]] = []

    def node(kids: list[tuple[int, int]]) -> tuple[int, int]:
        spans.append((kids[0][0], kids[-1][1]))
        return spans[-1]

    trees.rebuild(result.tree, node, lambda word, k: (k, k + 1))
    values = trees.node_labels(result.tree, result.confidence, result.is_word, order="close", default=None)
    return {span: value for span, value in zip(spans, values) if value is not None}


def _member_name(member: MemberResult) -> str:
    path = Path(member.source)
    return f"{path.parent.name}/{path.name} ({member.direction}, layer {member.layer})"

