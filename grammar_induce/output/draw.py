"""Pictures as plain SVG and self-contained HTML: trees with their distances, evaluation reports,
learning curves. No torch, no scripts from a network, no fonts but the reader's own.

Trees are drawn top-down with the words on one baseline; a word's width counts East Asian wide
characters as one em and others as 0.6 em, so Chinese lays out without overlaps. The workflows
call this module; nothing in the core imports it.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from html import escape as _html_escape
from pathlib import Path
from xml.sax.saxutils import escape as _xml_escape

from .. import trees
from ..files import write_text
from ..messages import plural
from ..trees import Tree

FONT = 14  # px
WORD_GAP = 14
LEVEL = 26  # px between tree levels
BAR = 28  # px of the tallest distance bar
MARGIN = 16
ARC = 7  # px of a dependency arc's depth per word it spans (up to ARC_WORDS words; longer arcs as deep)
ARC_WORDS = 10
# span colours: in a predicted tree, matched and wrong spans; in a gold tree, matched and missed ones
MATCHED, WRONG, MISSED, PLAIN = "#1a9850", "#d73027", "#f28e2b", "#444444"
STYLE = "text{font-family:sans-serif;font-size:14px} .small{font-size:11px;fill:#666}"


# what XML 1.0 cannot hold, even escaped: C0 controls but tab and newlines, surrogates, U+FFFE and U+FFFF
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_escape(text: str) -> str:
    """Text for SVG: escaped, and what XML cannot hold shown as U+FFFD, so the document stays well-formed."""
    return _xml_escape(_NOT_XML.sub("\ufffd", text))


def html_escape(text: str, quote: bool = True) -> str:
    return _html_escape(_NOT_XML.sub("\ufffd", text), quote=quote)


def text_width(text: str, size: float = FONT) -> float:
    return size * sum(1.0 if unicodedata.east_asian_width(ch) in "WF" else 0.6 for ch in text)


@dataclass
class _Node:
    start: int
    end: int
    x: float
    height: int
    children: list[_Node] = field(default_factory=list)


def _layout(tree: Tree, centers: Sequence[float]) -> _Node:
    """Each node's word span, x (between its first and last child) and height (leaves 0), bottom-up."""
    return trees.rebuild(tree, lambda kids: _Node(kids[0].start, kids[-1].end, (kids[0].x + kids[-1].x) / 2,
                                                 1 + max(k.height for k in kids), kids),
                         lambda word, k: _Node(k, k + 1, centers[k], 0))


def tree_svg(words: Sequence[str], tree: Tree, distances: Sequence[Sequence[float]] = (), layer: int = 0,
             span_colors: dict[tuple[int, int], str] | None = None, caption: str = "",
             heads: Sequence[tuple[int, str]] = (), confidence: dict[tuple[int, int], float] | None = None) -> str:
    """One sentence: its tree above the words and, under each word, one bar per layer for its
    distance (the `layer` row, counted from 1, marked; each row scaled from its sentence's lowest
    to its highest distance); under them, where given, the dependency `heads` (per word: its head's 1-based
    number, 0 for the root, and the relation) as arcs from head to dependent. `confidence` (by the words a node
    covers): each node's dot shaded by it (white 0 to dark blue 1) and written beside it."""
    widths = [max(text_width(w), 2 * FONT) for w in words]
    label = 3 * FONT if distances else 0
    centers, x = [], MARGIN + label
    for w in widths:
        centers.append(x + w / 2)
        x += w + WORD_GAP
    root = _layout(tree, centers)
    top = MARGIN + (FONT + 8 if caption else 0)
    baseline = top + root.height * LEVEL + FONT + 6
    arcs_top = baseline + 8 + len(distances) * (BAR + 8) + (6 if heads else 0)
    arcs, depth = _arcs(heads, centers, arcs_top)
    height = arcs_top + depth + MARGIN
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{x + MARGIN:.0f}" height="{height:.0f}" '
             f'viewBox="0 0 {x + MARGIN:.0f} {height:.0f}"><style>{STYLE}</style>')]
    if caption:
        parts.append(f'<text x="{MARGIN}" y="{MARGIN + FONT}" class="small">{xml_escape(caption)}</text>')
    parts += _tree_lines(root, top, baseline, span_colors or {}, len(words), confidence or {})
    parts += [f'<text x="{c:.1f}" y="{baseline:.1f}" text-anchor="middle" class="word">{xml_escape(w)}</text>'
              for c, w in zip(centers, words)]
    parts += _distance_bars(distances, layer, centers, baseline + 8)
    parts += arcs
    parts.append("</svg>")
    return "".join(parts)


def confidence_color(value: float) -> str:
    """A constituent's confidence as a shade: white at 0 to dark blue (#08306b) at 1."""
    value = min(max(value, 0.0), 1.0)
    return "#" + "".join(f"{round(255 + (dark - 255) * value):02x}" for dark in (0x08, 0x30, 0x6B))


CONFIDENCE_LEGEND = ("the dot of each constituent is shaded by how sure the parser is of it (white 0, dark blue 1) and "
                     "the number beside it says it: a PCFG's span marginal, an ensemble's share of the vote, a "
                     "student's CRF marginal, an ON-LSTM's share of its layers")


def _tree_lines(root: _Node, top: float, baseline: float, span_colors: dict, n_words: int,
                confidence: dict[tuple[int, int], float]) -> list[str]:
    """Lines from each node to its children, and a dot per node coloured by its span's status (or shaded by its
    confidence, written beside it)."""
    def y(node: _Node) -> float:
        return baseline - FONT - 2 if node.height == 0 else top + (root.height - node.height) * LEVEL

    parts, todo = [], [root]
    while todo:
        node = todo.pop()
        if not node.children:
            continue
        color = span_colors.get((node.start, node.end), PLAIN)
        for child in node.children:
            parts.append(f'<line x1="{node.x:.1f}" y1="{y(node):.1f}" x2="{child.x:.1f}" y2="{y(child):.1f}" '
                         f'stroke="{PLAIN}" stroke-width="1"/>')
            todo.append(child)
        whole = node.start == 0 and node.end == n_words
        sure = confidence.get((node.start, node.end))
        if sure is None:
            parts.append(f'<circle cx="{node.x:.1f}" cy="{y(node):.1f}" r="{3 if whole else 4}" fill="{color}" '
                         f'class="span" data-span="{node.start} {node.end}"/>')
            continue
        parts.append(f'<circle cx="{node.x:.1f}" cy="{y(node):.1f}" r="5" fill="{confidence_color(sure)}" '
                     f'stroke="{PLAIN}" class="span" data-span="{node.start} {node.end}" data-confidence="{sure:.4f}">'
                     f'<title>confidence {sure:.3f}</title></circle>'
                     f'<text x="{node.x + 7:.1f}" y="{y(node) - 4:.1f}" class="small">{sure:.2f}</text>')
    return parts


def _arcs(heads: Sequence[tuple[int, str]], centers: Sequence[float], top: float) -> tuple[list[str], float]:
    """Each word's arc from its head, hanging below `top` as deep as it is long (a dot at the dependent's end; the
    relation its tooltip), and a short stem under the root; and the depth they take."""
    parts, deepest = [], 0.0
    for k, (head, relation) in enumerate(heads):
        x = centers[k]
        if head == 0:
            parts.append(f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{top + 2 * ARC:.1f}" stroke="{PLAIN}" '
                         f'stroke-width="2" class="arc root" data-dependent="{k + 1}"><title>root</title></line>')
            deepest = max(deepest, 2.0 * ARC)
            continue
        start = centers[head - 1]
        depth = ARC * min(abs(head - 1 - k), ARC_WORDS)
        deepest = max(deepest, depth)
        parts.append(f'<path d="M{start:.1f},{top:.1f} Q{(start + x) / 2:.1f},{top + 2 * depth:.1f} {x:.1f},{top:.1f}" '
                     f'fill="none" stroke="{PLAIN}" stroke-width="1" class="arc" data-head="{head}" '
                     f'data-dependent="{k + 1}"><title>{xml_escape(relation)}</title></path>'
                     f'<circle cx="{x:.1f}" cy="{top:.1f}" r="2" fill="{PLAIN}"/>')
    return parts, deepest


def _distance_bars(distances: Sequence[Sequence[float]], layer: int, centers: Sequence[float],
                   top: float) -> list[str]:
    parts = []
    for k, row in enumerate(distances, start=1):
        bottom = top + k * (BAR + 8)
        chosen = k == layer
        parts.append(f'<text x="{MARGIN}" y="{bottom:.1f}" class="small">L{k}{" *" if chosen else ""}</text>')
        values = [d for d in row if d is not None]  # None: a token the model did not read (punctuation)
        low, high = min(values), max(values)
        for c, d in ((c, d) for c, d in zip(centers, row) if d is not None):
            # heights span the sentence's range of the layer (a trained model's distances differ little in
            # absolute terms); the value itself is the bar's tooltip
            h = 3 + (d - low) / (high - low) * (BAR - 3) if high > low else BAR / 2
            parts.append(f'<rect x="{c - 6:.1f}" y="{bottom - h:.1f}" width="12" height="{h:.1f}" '
                         f'fill="{"#2c7fb8" if chosen else "#bdbdbd"}" class="bar" data-layer="{k}">'
                         f'<title>{d:.4f}</title></rect>')
    return parts


def span_colors(predicted: Tree, gold: Tree) -> tuple[dict, dict]:
    """Colours for the predicted tree (matched, wrong) and the gold tree (matched, missed)."""
    pred, ref = trees.spans(predicted), trees.spans(gold)
    return ({s: MATCHED if s in ref else WRONG for s in pred}, {s: MATCHED if s in pred else MISSED for s in ref})


def page(title: str, body: Iterable[str], script: str = "") -> str:
    """A self-contained HTML page: inline style, inline pictures, at most a few lines of inline script."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html_escape(title)}</title><style>{PAGE_STYLE}</style></head><body>"
            f"<h1>{html_escape(title)}</h1>" + "".join(body)
            + (f"<script>{script}</script>" if script else "") + "</body></html>\n")


PAGE_STYLE = ("body{font-family:sans-serif;margin:24px;color:#222} .sentence{margin:18px 0;border-top:1px solid #ddd;"
              "padding-top:8px} .pictures{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start;"
              "overflow-x:auto} table{border-collapse:collapse} td,th{padding:2px 10px;text-align:right}"
              " td:first-child,th:first-child{text-align:left} .main{font-weight:bold} .legend span{margin-right:14px}")


def line_chart(series: dict[str, Sequence[tuple[float, float]]], x_label: str, y_label: str,
               marks: Sequence[float] = (), width: int = 560, height: int = 300) -> str:
    """Lines of (x, y) points, one per series, with axes, a legend and dashed vertical marks. Points
    that are not finite numbers (a diverged run's perplexity) are left out of the lines."""
    series = {name: [(x, y) for x, y in values if _drawable(x) and _drawable(y)] for name, values in series.items()}
    points = [p for values in series.values() for p in values]
    if not points:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="40"><text x="8" y="24">no data</text></svg>'
    x0, x1 = _axis_range([p[0] for p in points])
    y0, y1 = _axis_range([p[1] for p in points])
    marks = [m for m in marks if x0 <= m <= x1]
    left, right, top, bottom = 56, width - 150, 16, height - 40

    def sx(v: float) -> float:
        return left + (v - x0) / (x1 - x0) * (right - left)

    def sy(v: float) -> float:
        return bottom - (v - y0) / (y1 - y0) * (bottom - top)

    colors = ["#2c7fb8", "#d95f0e", "#1a9850", "#756bb1", "#636363", "#e7298a", "#66a61e", "#a6761d"]
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}"><style>{STYLE}</style>'),
             f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#444"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#444"/>',
             (f'<text x="{(left + right) / 2:.0f}" y="{height - 6}" text-anchor="middle" class="small">'
             f'{xml_escape(x_label)}</text>'),
             (f'<text x="12" y="{(top + bottom) / 2:.0f}" transform="rotate(-90 12 {(top + bottom) / 2:.0f})" '
             f'text-anchor="middle" class="small">{xml_escape(y_label)}</text>')]
    for value in (y0, (y0 + y1) / 2, y1):
        parts.append(f'<text x="{left - 4}" y="{sy(value) + 4:.1f}" text-anchor="end" class="small">{value:.3g}</text>')
    for value in (x0, x1):
        parts.append(f'<text x="{sx(value):.1f}" y="{bottom + 14}" text-anchor="middle" class="small">{value:g}</text>')
    for value in marks:
        parts.append(f'<line x1="{sx(value):.1f}" y1="{top}" x2="{sx(value):.1f}" y2="{bottom}" stroke="#999" '
                     'stroke-dasharray="4 3" class="mark"/>')
    for k, ((name, values), label) in enumerate(zip(series.items(), legend_labels(list(series)))):
        color = colors[k % len(colors)]
        path = " ".join(f"{sx(a):.1f},{sy(b):.1f}" for a, b in values)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2" class="series"/>')
        parts += [f'<circle cx="{sx(a):.1f}" cy="{sy(b):.1f}" r="2.5" fill="{color}"/>' for a, b in values]
        parts.append(f'<text x="{right + 10}" y="{top + 14 + 16 * k}" fill="{color}">{xml_escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _drawable(value: float) -> bool:
    """A number a chart can place: finite and far enough from the float limits to scale."""
    return isinstance(value, (int, float)) and math.isfinite(value) and abs(value) < 1e300


def _axis_range(values: Sequence[float]) -> tuple[float, float]:
    """The lowest and highest value, widened around a single value (where adding 1 may change
    nothing: 4.3e116 + 1 is 4.3e116)."""
    low, high = min(values), max(values)
    if high > low:
        return low, high
    pad = max(abs(low) * 0.05, 1.0)
    return low - pad, high + pad


def legend_labels(names: Sequence[str], width: int = 20) -> list[str]:
    """Legend labels of at most `width` characters, distinct where the names are: a long name keeps its
    end (a run directory's own name), and labels that would still be equal are numbered."""
    labels = [name if len(name) <= width else "\u2026" + name[-(width - 1):] for name in names]
    counts = Counter(labels)
    return [f"{k + 1}: {label[-(width - 4):]}" if counts[label] > 1 else label for k, label in enumerate(labels)]


def learning_curves(runs: dict[str, list[dict]]) -> str:
    """Train loss and validation perplexity per epoch of one or more runs (metrics.jsonl records);
    a dashed line marks each run's switch to averaged SGD."""
    switches = [next((r["epoch"] - 0.5 for r in records if r["phase"] == "asgd"), None) for records in runs.values()]
    marks = [m for m in switches if m is not None]
    loss = {name: [(_at(r), r["train_loss"]) for r in records] for name, records in runs.items()}
    ppl = {name: [(_at(r), r["valid_ppl"]) for r in records if r["valid_ppl"] is not None]
           for name, records in runs.items()}
    return ('<svg xmlns="http://www.w3.org/2000/svg" width="1120" height="300" viewBox="0 0 1120 300">'
            + _nested(line_chart(loss, "epoch", "train loss", marks), 0)
            + _nested(line_chart(ppl, "epoch", "valid perplexity", marks), 560) + "</svg>")


def _at(record: dict) -> float:
    """Where a metrics record sits on the epoch axis: a partial epoch (a limit stopped it) at the share it ran."""
    return record["epoch"] - 1 + record["partial"] if record.get("partial") is not None else record["epoch"]


def _nested(svg: str, x: int) -> str:
    return svg.replace("<svg ", f'<svg x="{x}" y="0" ', 1)


def parse_page(sentences: Iterable[tuple[list[str], Tree, list[tuple[str, Tree, list[list[float]], int]],
                                         Sequence[tuple[int, str]], dict[tuple[int, int], float]]]) -> str:
    """Every sentence's picture: (words, combined tree, members as (name, tree, distances per layer, the
    layer its tree came from, marked), dependency heads per word or (), each node's confidence or {}). With one
    member, its tree and distances; with several, the combined tree, then each member's; the heads under the
    first; a legend of the shading where a tree has confidences."""
    body, shaded = [], False
    for words, tree, members, heads, confidence in sentences:
        if not words:
            continue
        shaded |= bool(confidence)
        if len(members) == 1:
            pictures = [tree_svg(words, tree, members[0][2], members[0][3], heads=heads, confidence=confidence)]
        else:
            pictures = [tree_svg(words, tree, caption=f"combined ({len(members)} models)", heads=heads,
                                 confidence=confidence)]
            pictures += [tree_svg(words, t, d, layer, caption=name) for name, t, d, layer in members]
        body.append(f'<div class="sentence"><div class="pictures">{"".join(pictures)}</div></div>')
    if shaded:
        body.insert(0, f'<p class="legend">{html_escape(CONFIDENCE_LEGEND)}</p>')
    return page("grammar-induce: parsed sentences", body)


@dataclass
class ReportSentence:
    source: str  # file:line of the gold tree
    words: list[str]
    predicted: Tree
    gold: Tree


def report_page(title: str, table: list[tuple[str, dict]], main_row: str,
                by_length: dict[str, dict[str, float]], sentences: Sequence[ReportSentence], total: int) -> str:
    """The evaluation: the F1 table, sentence F1 by length, and sentences with the predicted tree beside
    the gold one (spans matched, wrong and missed in three colours), sortable and filterable."""
    head = "<tr><th></th><th>sent F1</th><th>corpus F1</th><th>prec</th><th>recall</th></tr>"
    rows = "".join(
        f'<tr class="{"main" if name == main_row else ""}"><td>{html_escape(name)}{" *" if name == main_row else ""}</td>'
        + "".join(f"<td>{100 * m[key]:.1f}</td>" for key in ("sentence_f1", "corpus_f1", "precision", "recall"))
        + "</tr>" for name, m in table)
    buckets = {name: [(_bucket_start(b), 100 * f1) for b, f1 in values.items()] for name, values in by_length.items()}
    chart = line_chart(buckets, "sentence length (words, bucket start)", "sentence F1")
    legend = (f'<p class="legend"><span style="color:{MATCHED}">&#9679; matched span</span>'
              f'<span style="color:{WRONG}">&#9679; predicted, not in gold</span>'
              f'<span style="color:{MISSED}">&#9679; gold, missed</span></p>')
    controls = ('<p>sort by <button onclick="sortBy(\'f1\')">F1</button> <button onclick="sortBy(\'n\')">length'
                '</button> <button onclick="sortBy(\'id\')">order</button> &nbsp; filter <input id="filter" '
                'oninput="filterBy(this.value)" placeholder="words"></p>')
    shown = f"<p>{len(sentences):,} of {plural(total, 'sentence')} shown (predicted left, gold right).</p>"
    items = [_report_sentence(k, s) for k, s in enumerate(sentences)]
    body = [f"<table>{head}{rows}</table>", f"<h2>Sentence F1 by length</h2>{chart}",
            "<h2>Sentences</h2>", shown, legend, controls, f'<div id="sentences">{"".join(items)}</div>']
    return page(title, body, SORT_AND_FILTER)


SORT_AND_FILTER = """
function sortBy(key){const box=document.getElementById('sentences');
[...box.children].sort((a,b)=>Number(a.dataset[key])-Number(b.dataset[key])).forEach(e=>box.appendChild(e));}
function filterBy(text){text=text.toLowerCase();
for(const e of document.getElementById('sentences').children){e.hidden=!e.dataset.text.includes(text);}}
"""


def _bucket_start(bucket: str) -> float:
    return float(bucket.split("-")[0].rstrip("+"))


def _report_sentence(k: int, s: ReportSentence) -> str:
    from ..metrics import sentence_scores

    f1 = 100 * sentence_scores(trees.spans(s.predicted), trees.spans(s.gold))[2]
    predicted_colors, gold_colors = span_colors(s.predicted, s.gold)
    text = html_escape(" ".join(s.words).lower(), quote=True)
    return (f'<div class="sentence" data-id="{k}" data-n="{len(s.words)}" data-f1="{f1:.1f}" data-text="{text}">'
            f'<div class="small">{html_escape(s.source)}: {len(s.words)} words, F1 {f1:.1f}</div>'
            f'<div class="pictures">{tree_svg(s.words, s.predicted, span_colors=predicted_colors, caption="predicted")}'
            f'{tree_svg(s.words, s.gold, span_colors=gold_colors, caption="gold")}</div></div>')


def write_run_curves(run_dir: Path) -> None:
    """A run folder's learning curves as its curves.svg (the training loop's after each epoch)."""
    write_curves([run_dir], run_dir / "curves.svg")


def write_curves(run_dirs: list[Path], path: Path) -> None:
    """Learning curves of one or more runs (from their metrics.jsonl) as one SVG."""
    from ..runtime.rundir import read_metrics

    runs = {}
    for run_dir in run_dirs:
        name = Path(run_dir).resolve().name
        runs[name if name not in runs else str(run_dir)] = read_metrics(run_dir)
    write_text(path, learning_curves(runs))
