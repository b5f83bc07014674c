"""`grammar-induce grammar`: what an induced PCFG learned, as a reader can take it in. Its symbols off the rule
distributions (its family's `GrammarTools`: families/pcfg/inspection.py); on a text, how often each nonterminal labels
a constituent of the MBR trees and its most frequent spans; on gold trees, each nonterminal's best-matching treebank category (many-to-one:
the category of most of its constituents that are gold constituents) with its precision and recall. The best
matches are a label map (`--save-map`) that `parse --label-map` applies: a mapping learned from a treebank, never
supervised labels."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from ..errors import InputError, SettingError
from ..families.pretrained import shown
from ..inference.maps import Fitted, LabelMap
from ..inference.members import Members
from ..inference.parsing import parse
from ..output import grammar
from ..output.grammar import Symbol
from ..text.treebank import GoldTree, TagFilter, read_gold


@dataclass(frozen=True)
class LabelMatch:
    """An induced label's best-matching gold category: of its `spans` constituents (two or more words) on the gold
    sentences, `matched` are gold constituents of `category`, which has `gold` constituents in all."""

    category: str
    matched: int
    spans: int
    gold: int

    @property
    def precision(self) -> float:
        return self.matched / self.spans if self.spans else 0.0

    @property
    def recall(self) -> float:
        return self.matched / self.gold if self.gold else 0.0


@dataclass
class GrammarReport:
    model: str
    symbols: list[Symbol]
    text: str = ""  # what the usage was counted on
    usage: Counter = field(default_factory=Counter)  # label -> constituents it labels on the text
    spans: dict[str, Counter] = field(default_factory=dict)  # label -> its constituents' words -> how often
    gold: str = ""
    matches: dict[str, LabelMatch] = field(default_factory=dict)  # label -> its best match on the gold trees
    source: str = ""  # the model's file (its label map is tied to it)

    @property
    def nonterminals(self) -> list[Symbol]:
        """The nonterminals, the most used first (on the text where there is one, else by their share of the rules)."""
        found = [s for s in self.symbols if s.name.startswith("NT-")]
        return sorted(found, key=lambda s: (-self.usage[s.name], -s.child - s.root))

    @property
    def preterminals(self) -> list[Symbol]:
        return sorted((s for s in self.symbols if s.name.startswith("T-")), key=lambda s: -s.child)

    def label_map(self) -> dict[str, str]:
        return {label: match.category for label, match in self.matches.items()}

    def table(self, top: int = 20) -> str:
        """The `top` nonterminals and preterminals as text (output/grammar.py)."""
        return grammar.table(self, top)

    def to_html(self) -> str:
        """The report as one self-contained HTML page (output/grammar.py)."""
        return grammar.page(self)

    def to_dict(self) -> dict:
        return {"model": self.model, "text": self.text or None, "gold": self.gold or None, "symbols": [
            {"name": s.name, "root": s.root, "child": s.child,
             **({"rules": [[b, c, p] for b, c, p in s.rules]} if s.rules else {}),
             **({"words": [[w, p] for w, p in s.words]} if s.words else {}),
             **({"usage": self.usage[s.name], "spans": self.spans.get(s.name, Counter()).most_common(10)}
                if self.text else {}),
             **({"best_match": {"category": m.category, "precision": m.precision, "recall": m.recall,
                                "matched": m.matched, "constituents": m.spans}}
                if (m := self.matches.get(s.name)) else {})}
            for s in [*self.nonterminals, *self.preterminals]]}

    def map_json(self) -> str:
        """The label map as `parse --label-map` reads it, tied to the model's file."""
        return LabelMap(self.label_map(), Fitted.of([self.source])).to_json(self.gold)


def read_grammar(members: Members, text: Iterable[str] | None = None, text_name: str = "", gold: str | None = None,
                 tags: TagFilter | None = None, top: int = 5) -> GrammarReport:
    """The report of the one PCFG among `members`: its symbols with `top` rules or words each; usage and spans on
    `text` (lines); best matches on the trees of `gold`."""
    loaded = members.models[0]
    tools = loaded.family.grammar
    if len(members.models) != 1 or tools is None:
        raise SettingError("model", "grammar reads one induced PCFG (model.kind = \"pcfg\"), not "
                           + (f"an ensemble of {len(members.models)}" if len(members.models) > 1
                              else loaded.family.description))
    members = replace(members, options=replace(members.options, labels=True))
    report = GrammarReport(shown(loaded.source), tools.symbols(loaded.model.grammar(), loaded.vocab.words, top),
                           source=loaded.source)
    if text is not None:
        report.text = text_name
        results, _ = parse(members, text)
        for result in results:
            for (i, j), label in (result.labels or {}).items():
                report.usage[label] += 1
                report.spans.setdefault(label, Counter())[" ".join(result.words[i:j])] += 1
    if gold is not None:
        trees_, _ = read_gold(gold, tags or TagFilter())
        report.gold, report.matches = gold, best_matches(members, trees_)
    return report


def best_matches(members: Members, gold: list[GoldTree]) -> dict[str, LabelMatch]:
    """Each induced label's gold category of most of its constituents (two or more words) that are gold ones."""
    parsed = members.parse_all([g.words for g in gold])
    if parsed is None:
        raise InputError("no gold trees to match labels on")
    hits: dict[str, Counter] = {}
    spans: Counter = Counter()
    totals: Counter = Counter()
    for reading, g in zip(parsed.readings[0], gold):
        categories = g.categories()
        totals.update(categories.values())
        for span, label in (reading.labels or {}).items():
            spans[label] += 1
            if span in categories:
                hits.setdefault(label, Counter())[categories[span]] += 1
    return {label: LabelMatch(category, n, spans[label], totals[category])
            for label, counts in hits.items() for category, n in [counts.most_common(1)[0]]}
