"""How `grammar-induce grammar`'s report (workflows/grammar.py: an induced PCFG's symbols, their usage on a text and
best matches on gold trees) is rendered: the table it prints and its HTML page. Where they change, they change here."""

from __future__ import annotations

from collections import Counter
from typing import Protocol

from ..messages import plural
from . import draw


class Symbol(Protocol):  # families/pcfg/inspection.Symbol, as rendered
    name: str
    root: float
    child: float
    rules: list[tuple[str, str, float]]
    words: list[tuple[str, float]]


class Match(Protocol):  # workflows/grammar.LabelMatch, as rendered
    category: str
    precision: float
    recall: float


class Report(Protocol):  # workflows/grammar.GrammarReport, as rendered
    model: str
    text: str
    gold: str
    usage: Counter
    spans: dict[str, Counter]
    matches: dict[str, Match]
    nonterminals: list[Symbol]
    preterminals: list[Symbol]


def table(report: Report, top: int = 20) -> str:
    """The `top` nonterminals (the most used first) and preterminals as text."""
    lines = [(f"the induced grammar of {report.model}: {plural(len(report.nonterminals), 'nonterminal')}, "
              f"{plural(len(report.preterminals), 'preterminal')}")]
    if report.text:
        lines.append(f"usage: constituents of the MBR trees of {report.text} each labels")
    if report.gold:
        lines.append(f"best match: the gold category (of {report.gold}) of most of its constituents that are gold "
                     "constituents, many-to-one; prec: their share of its constituents, rec: of the category's")
    lines.append(f"\nnonterminals (the {min(top, len(report.nonterminals))} most used; root: p(S -> it); child: its "
                 "share of the rules' children)")
    lines += [_nonterminal_line(report, s) for s in report.nonterminals[:top]]
    lines.append(f"\npreterminals (the {min(top, len(report.preterminals))} most used as children)")
    for s in report.preterminals[:top]:
        words = ", ".join(f"{w} {p:.2f}" for w, p in s.words)
        lines.append(f"  {s.name:7s} child {s.child:.4f}  {words}")
    return "\n".join(lines)


def _nonterminal_line(report: Report, s: Symbol) -> str:
    parts = [f"  {s.name:7s} root {s.root:.3f} child {s.child:.4f}"]
    if report.text:
        parts.append(f"usage {report.usage[s.name]:,}")
    if s.name in report.matches:
        m = report.matches[s.name]
        parts.append(f"best match {m.category} (prec {100 * m.precision:.1f}, rec {100 * m.recall:.1f})")
    rules = ", ".join(f"{b} {c} {p:.2f}" for b, c, p in s.rules[:3])
    parts.append(f"rules {rules}")
    if report.spans.get(s.name):
        parts.append("spans " + "; ".join(f"{words} ({n})" for words, n in report.spans[s.name].most_common(3)))
    return "  ".join(parts)


def page(report: Report) -> str:
    """The report as one self-contained HTML page: a table of every nonterminal, then of every preterminal."""

    def row(cells: list[str]) -> str:
        return "<tr>" + "".join(f"<td>{draw.html_escape(c)}</td>" for c in cells) + "</tr>"

    def head(cells: list[str]) -> str:
        return "<tr>" + "".join(f"<th>{draw.html_escape(c)}</th>" for c in cells) + "</tr>"

    nonterminals = [head(["symbol", "root", "child", *(["usage", "spans"] if report.text else []),
                          *(["best match", "prec", "rec"] if report.gold else []), "rules"])]
    for s in report.nonterminals:
        m = report.matches.get(s.name)
        nonterminals.append(row([
            s.name, f"{s.root:.3f}", f"{s.child:.4f}",
            *([f"{report.usage[s.name]:,}", "; ".join(f"{w} ({n})" for w, n in
                                                     report.spans.get(s.name, Counter()).most_common(3))]
              if report.text else []),
            *(([m.category, f"{100 * m.precision:.1f}", f"{100 * m.recall:.1f}"] if m else ["", "", ""])
              if report.gold else []),
            ", ".join(f"{b} {c} {p:.3f}" for b, c, p in s.rules)]))
    preterminals = [head(["symbol", "child", "words"])] + [
        row([s.name, f"{s.child:.4f}", ", ".join(f"{w} {p:.3f}" for w, p in s.words)]) for s in report.preterminals]
    intro = table(report, 0).split("\n\n")[0].replace("\n", " ")
    body = [f"<p>{draw.html_escape(intro)}</p>", "<h2>nonterminals</h2>", f"<table>{''.join(nonterminals)}</table>",
            "<h2>preterminals</h2>", f"<table>{''.join(preterminals)}</table>"]
    return draw.page(f"grammar-induce: the induced grammar of {report.model}", body)
