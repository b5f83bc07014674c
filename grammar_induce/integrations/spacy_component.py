"""grammar-induce as a spaCy pipeline component (`pip install "grammar-induce[spacy]"`):

    import spacy
    nlp = spacy.blank("en"); nlp.add_pipe("sentencizer")
    nlp.add_pipe("grammar_induce", config={"model": "en"})
    doc = nlp("The old man's dog didn't bark. The cat sat on the mat.")
    sent = list(doc.sents)[0]
    sent._.parse_string, [c.text for c in sent._.constituents], sent._.children, sent._.tree

The component parses spaCy's own tokens (every token of a sentence is a leaf; punctuation is set aside
for the model and put back, as `grammar-induce parse` does), one tree per sentence of whatever sentence
boundaries the pipeline has (the whole doc when there are none). `nlp.pipe` parses the sentences of many
documents in one batch. The attribute names are benepar's where the meaning is the same: `parse_string`,
`constituents`, `children`, `parent` (of a sentence or a constituent span); `labels` is () and every node of
`parse_string` is X, since induced trees have no labels, unless the model induces them (a PCFG) and the config
asks for them (`"labels": true`): then a constituent's `labels` is its symbol, `("NT-17",)`, and `parse_string`
and `tree` carry them. `tree` is the sentence's nltk.Tree. A model with dependency heads (a StructFormer) also
gives each token `induced_head` (the head Token; None for a sentence's root) and `induced_dep` ("root", "dep", or
"punct" for punctuation, which hangs from the word before it, as `--format conll` writes it): spaCy's own `head` and
`dep_` are left to the pipeline's parser. With `"confidence": true`, a constituent's `induced_confidence` is how sure
the parser is of it (`grammar_induce.load(confidence=True)`: a PCFG's span marginal, an ensemble's share of the vote;
None for a single token, or where the model gives none).

Registered through the `spacy_factories` entry point; nothing else in grammar_induce imports this module.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from spacy.language import Language
from spacy.tokens import Doc, Span, Token
from spacy.util import minibatch

from .. import api, trees
from ..families import pretrained

NAME = "grammar_induce"
DEFAULT_CONFIG: dict[str, Any] = {"model": pretrained.DEFAULT_MODEL, "layer": None, "distance": None,
                                  "decoder": None, "combine": None, "right_voter": None, "batch_size": 64,
                                  "precision": "fp32", "device": None, "labels": False, "confidence": False,
                                  "weights": None, "calibration": None, "label_map": None, "map_any_model": False,
                                  "prune": None, "prune_threshold": None, "prune_mass": False}
COPIED = "models"  # the folder of a local checkpoint's copy, inside the component's folder of nlp.to_disk


def _constituents(span: Span) -> Iterator[Span]:
    """The sentence, then every constituent below it, top down, left to right (single tokens included)."""
    todo = [span]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(reversed(_children(node)))


def _children(span: Span) -> list[Span]:
    found = span.doc.user_data.get((NAME, "spans", span.start, span.end), [])
    return [span.doc[start:end] for start, end in found]


def _parent(span: Span) -> Span | None:
    found = span.doc.user_data.get((NAME, "parent", span.start, span.end))
    return None if found is None else span.doc[found[0] : found[1]]


def _parse_string(span: Span) -> str | None:
    """The tree as one line of bracket text that any bracket reader reads back: brackets in words written as the
    Penn Treebank does (-LRB-, -RRB-), as benepar writes them."""
    tree = _stored(span)
    return None if tree is None else trees.to_labelled_brackets(tree, *_stored_labels(span))


def _tree(span: Span):
    tree = _stored(span)
    return None if tree is None else api.to_nltk(tree, *_stored_labels(span))


def _stored(span: Span) -> trees.Tree | None:
    """The sentence's tree, kept in the doc's user data as bracket text: plain data that spaCy's serialisation
    (msgpack, which recurses per level) and pickle carry however deep the tree is."""
    text = span.doc.user_data.get((NAME, "tree", span.start, span.end))
    return None if text is None else trees.parse_brackets(text)


def _stored_labels(span: Span) -> tuple[dict[tuple[int, int], str] | None, list[bool] | None]:
    """The tree's induced labels by word span, and which leaves are words: kept as [start, end, label] rows (a dict
    with tuple keys comes back from msgpack with lists as keys, which no dict holds)."""
    rows, is_word = span.doc.user_data.get((NAME, "labels", span.start, span.end), (None, None))
    return (None if rows is None else {(i, j): label for i, j, label in rows}), is_word


def _induced_confidence(span: Span) -> float | None:
    return span.doc.user_data.get((NAME, "confidence", span.start, span.end))


def _kept_mass(span: Span) -> float | tuple[float | None, ...] | None:
    """A sentence's share of its grammar's probability that the pruned chart's spans carried (`prune_mass`): a number
    for one model, one per model for an ensemble (None for a model without chart constraints); None unasked."""
    found = span.doc.user_data.get((NAME, "kept_mass", span.start, span.end))
    if found is None:
        return None
    return found[0] if len(found) == 1 else tuple(found)


def _labels(span: Span) -> tuple[str, ...]:
    label = span.doc.user_data.get((NAME, "label", span.start, span.end))
    return () if label is None else (label,)


def _induced_head(token: Token) -> Token | None:
    head = token.doc.user_data.get((NAME, "head", token.i))
    return None if head is None or head[0] is None else token.doc[head[0]]


def _induced_dep(token: Token) -> str | None:
    head = token.doc.user_data.get((NAME, "head", token.i))
    return None if head is None else head[1]


def _register_extensions() -> None:
    getters = {"parse_string": _parse_string, "constituents": _constituents, "children": _children,
               "parent": _parent, "tree": _tree, "labels": _labels, "induced_confidence": _induced_confidence,
               "kept_mass": _kept_mass}
    for name, getter in getters.items():
        if not Span.has_extension(name):
            Span.set_extension(name, getter=getter)
    for name, getter in {"induced_head": _induced_head, "induced_dep": _induced_dep}.items():
        if not Token.has_extension(name):
            Token.set_extension(name, getter=getter)


class GrammarInduce:
    """The pipeline component: a grammar-induce Parser over each sentence's tokens."""

    def __init__(self, nlp: Language, name: str, model: str | list[str], **options: Any):
        self.name = name
        self.models = [model] if isinstance(model, str) else list(model)
        if not self.models:
            raise ValueError("model is an empty list: name a model (a shipped name or a checkpoint path; a list of "
                             "them for an ensemble)")
        self.process = os.getpid()
        self.options = options
        # a checkpoint path that is not there may be the copy nlp.to_disk keeps beside the pipeline, which
        # from_disk loads next; anything else (a bad name, a bad setting) is refused here, at add_pipe
        self._parser = None if any(_copied_later(m) for m in self.models) else api.load(*self.models, **options)
        _register_extensions()

    @property
    def parser(self) -> api.Parser:
        if self._parser is None:
            self._parser = api.load(*self.models, **self.options)  # says which checkpoint is missing
        return self._parser

    def __call__(self, doc: Doc) -> Doc:
        return next(self.pipe([doc]))

    def pipe(self, docs: Iterable[Doc], batch_size: int = 128) -> Iterator[Doc]:
        """Parse every sentence of a batch of documents together (batches of sentences of similar length
        fill the models better than one call per document)."""
        self._in_this_process()
        for batch in minibatch(docs, size=batch_size):
            sentences = [sent for doc in batch for sent in _sentences(doc)]
            positions = [[token.i for token in sent if not token.is_space] for sent in sentences]
            tokens = [[sent.doc[i].text for i in kept] for sent, kept in zip(sentences, positions)]
            results, _ = self.parser.run(tokens, confidence=bool(self.options.get("confidence")))
            for sent, kept, result in zip(sentences, positions, results):
                if result.tree is not None:
                    _store(sent, result.tree, kept)
                if result.tree is not None and result.labels:
                    _store_labels(sent, result.tree, result.labels, result.is_word, kept)
                if result.tree is not None and result.confidence:
                    _store_confidence(sent, result.tree, result.confidence, result.is_word, kept)
                if result.tree is not None and result.heads is not None:
                    _store_heads(sent, result.token_heads(), kept)
                if any(m.kept_mass is not None for m in result.members):
                    sent.doc.user_data[NAME, "kept_mass", sent.start, sent.end] = [m.kept_mass for m in result.members]
            yield from batch

    def _in_this_process(self) -> None:
        """In a worker that spaCy forked for `nlp.pipe(n_process=N)`, torch runs on one thread: the parent's
        OpenMP threads do not exist in the child, and the first parallel region there would wait for them forever."""
        if os.getpid() != self.process:
            import torch

            torch.set_num_threads(1)
            self.process = os.getpid()

    def to_disk(self, path: str | Path, exclude: Iterable[str] = ()) -> None:
        """The config names the model; a local checkpoint (not a shipped name) is copied beside it."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for k, model in enumerate(self.models):
            if pretrained.find(model) is None:
                (path / COPIED).mkdir(exist_ok=True)
                shutil.copyfile(model, path / COPIED / f"{k}-{Path(model).name}")

    def from_disk(self, path: str | Path, exclude: Iterable[str] = ()) -> GrammarInduce:
        copied = Path(path) / COPIED
        if copied.is_dir():
            by_position = {int(f.name.split("-", 1)[0]): f for f in copied.iterdir()}
            self.models = [str(by_position.get(k, model)) for k, model in enumerate(self.models)]
            self._parser = api.load(*self.models, **self.options)
        return self


def _copied_later(model: str) -> bool:
    """A checkpoint's path (not a shipped name) whose file is not there."""
    return pretrained.find(model) is None and not Path(model).exists() and ("/" in model or model.endswith(".pt"))


def _sentences(doc: Doc) -> list[Span]:
    """The doc's sentences, or the whole doc when nothing set sentence boundaries."""
    if doc.has_annotation("SENT_START"):
        return list(doc.sents)
    return [doc[:]] if len(doc) else []


def _store(sent: Span, tree: trees.Tree, positions: list[int]) -> None:
    """The tree's constituents as token offsets in the doc's user data (spaCy keeps it with the doc): leaf k is
    the doc's token positions[k] (whitespace tokens are no leaves; a constituent's span runs over those inside)."""
    data = sent.doc.user_data
    data[NAME, "tree", sent.start, sent.end] = trees.to_brackets(tree)
    spans = _node_spans(tree, positions)
    for (start, end), children in spans.items():
        data[NAME, "spans", start, end] = children
        for child in children:
            data[NAME, "parent", *child] = (start, end)
    if spans:  # the sentence is the root, whitespace at its ends included
        data[NAME, "spans", sent.start, sent.end] = root_children = list(spans.values())[-1]
        for child in root_children:
            data[NAME, "parent", *child] = (sent.start, sent.end)


def _node_spans(tree: trees.Tree, positions: list[int]) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """Each node's doc span (first leaf's token to last leaf's, inclusive) and its children's, in walk order."""
    found: dict[tuple[int, int], list[tuple[int, int]]] = {}
    stack: list[list[tuple[int, int]]] = [[]]
    leaf = 0
    for event in trees.walk(tree):
        if event is trees.OPEN:
            stack.append([])
        elif event is trees.CLOSE:
            children = stack.pop()
            span = (children[0][0], children[-1][1])
            found[span] = children
            stack[-1].append(span)
        else:
            stack[-1].append((positions[leaf], positions[leaf] + 1))
            leaf += 1
    return found


def _store_heads(sent: Span, heads: list[tuple[int, str]], positions: list[int]) -> None:
    """Each token's induced head (its doc position; None for the root) and relation, from `heads` (per token: its
    head's 1-based number, 0 for the root, and the relation: SentenceResult.token_heads)."""
    for k, (head, relation) in enumerate(heads):
        sent.doc.user_data[NAME, "head", positions[k]] = (positions[head - 1] if head else None, relation)


def _store_labels(sent: Span, tree: trees.Tree, labels: dict, is_word: list[bool] | None, positions: list[int]) -> None:
    """Each constituent's induced label, by its doc span (see trees.node_labels)."""
    data = sent.doc.user_data
    data[NAME, "labels", sent.start, sent.end] = ([[i, j, label] for (i, j), label in sorted(labels.items())], is_word)
    names = iter(trees.node_labels(tree, labels, is_word, order="close"))
    for span in _node_spans(tree, positions):
        data[NAME, "label", *span] = next(names)


def _store_confidence(sent: Span, tree: trees.Tree, confidence: dict, is_word: list[bool] | None,
                      positions: list[int]) -> None:
    """Each constituent's confidence, by its doc span (the sentence's by its own span, as `_store` keeps its root)."""
    data = sent.doc.user_data
    values = trees.node_labels(tree, confidence, is_word, order="close", default=None)
    spans = list(_node_spans(tree, positions))
    for span, value in zip(spans, values):
        if value is not None:
            data[NAME, "confidence", *span] = value
    if spans and values[-1] is not None:
        data[NAME, "confidence", sent.start, sent.end] = values[-1]


@Language.factory(NAME, default_config=DEFAULT_CONFIG)
def make_grammar_induce(nlp: Language, name: str, model: str | list[str], layer: Any, distance: str | None,
                        decoder: str | None, combine: str | None, right_voter: float | None, batch_size: int,
                        precision: str, device: str | None, labels: bool = False, confidence: bool = False,
                        weights: Any = None, calibration: str | None = None, label_map: str | None = None,
                        map_any_model: bool = False, prune: str | None = None, prune_threshold: float | None = None,
                        prune_mass: bool = False) -> GrammarInduce:
    """The factory spaCy calls for nlp.add_pipe("grammar_induce", config={...}): the model (a shipped name or a
    checkpoint path, or a list of them for an ensemble) and every option of `grammar_induce.load` that is not about
    splitting text (spaCy's tokens are the words)."""
    return GrammarInduce(nlp, name, model, layer=layer, distance=distance, decoder=decoder, combine=combine,
                         right_voter=right_voter, batch_size=batch_size, precision=precision, device=device,
                         labels=labels, confidence=confidence, weights=weights, calibration=calibration,
                         label_map=label_map, map_any_model=map_any_model, prune=prune, prune_threshold=prune_threshold,
                         prune_mass=prune_mass)
