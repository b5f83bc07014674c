import itertools
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from grammar_induce import trees
from grammar_induce.cli import main
from grammar_induce.output import draw

from .test_cli import run

SVG = "{http://www.w3.org/2000/svg}"


def svg_parts(svg: str):
    root = ET.fromstring(svg)
    words = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "word"]
    bars = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "bar"]
    dots = [c for c in root.iter(f"{SVG}circle") if c.get("class") == "span"]
    return root, words, bars, dots


def test_a_tree_svg_has_every_word_once_in_order_and_a_bar_per_word_and_layer():
    words = "the old man saw a dog".split()
    distances = [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [0.6, 0.1, 0.5, 0.2, 0.4, 0.3], [0.0] * 6]
    _root, drawn, bars, dots = svg_parts(draw.tree_svg(words, trees.balanced(words), distances, layer=2))
    assert drawn == words
    assert sorted((b.get("data-layer"), float(b.get("x"))) for b in bars) == sorted(
        (str(k), float(b.get("x"))) for k in (1, 2, 3) for b in bars if b.get("data-layer") == "1")
    assert len(bars) == 18 and {b.get("fill") for b in bars if b.get("data-layer") == "2"} == {"#2c7fb8"}
    assert {b.get("fill") for b in bars if b.get("data-layer") != "2"} == {"#bdbdbd"}
    tallest = max(bars[6:12], key=lambda b: float(b.get("height")))
    assert tallest.find(f"{SVG}title").text == "0.6000"  # layer 2's largest distance has the tallest bar
    assert len(dots) == len(trees.spans(trees.balanced(words))) + 1  # every span and the root


def test_wide_characters_take_a_whole_em():
    assert draw.text_width("苹果") == 2 * draw.FONT and draw.text_width("ab") == pytest.approx(1.2 * draw.FONT)
    words = ["我们", "喜欢", "北京的", "苹果"]
    root = ET.fromstring(draw.tree_svg(words, trees.right_branching(words)))
    texts = [t for t in root.iter(f"{SVG}text") if t.get("class") == "word"]
    for left, right in itertools.pairwise(texts):  # no two words overlap
        gap = float(right.get("x")) - float(left.get("x"))
        assert gap >= (draw.text_width(left.text) + draw.text_width(right.text)) / 2


def test_span_colours_match_the_f1_counts():
    words = list("abcde")
    predicted, gold = [["a", "b"], ["c", ["d", "e"]]], [[["a", "b"], "c"], ["d", "e"]]
    pred_spans, gold_spans = trees.spans(predicted), trees.spans(gold)
    predicted_colors, gold_colors = draw.span_colors(predicted, gold)
    _, _, _, dots = svg_parts(draw.tree_svg(words, predicted, span_colors=predicted_colors))
    fills = [d.get("fill") for d in dots]
    assert fills.count(draw.MATCHED) == len(pred_spans & gold_spans) == 2
    assert fills.count(draw.WRONG) == len(pred_spans - gold_spans) == 1
    _, _, _, dots = svg_parts(draw.tree_svg(words, gold, span_colors=gold_colors))
    fills = [d.get("fill") for d in dots]
    assert fills.count(draw.MATCHED) == 2 and fills.count(draw.MISSED) == len(gold_spans - pred_spans) == 1


def test_learning_curves_mark_the_switch_to_averaged_sgd():
    records = [{"epoch": e, "train_loss": 6 - e / 2, "valid_ppl": 300 - 20 * e, "phase": "sgd" if e < 4 else "asgd"}
               for e in range(1, 6)]
    root = ET.fromstring(draw.learning_curves({"a": records, "b": records[:3]}))
    assert len([p for p in root.iter(f"{SVG}polyline")]) == 4  # two runs in two charts
    assert len([m for m in root.iter(f"{SVG}line") if m.get("class") == "mark"]) == 2  # once per chart


class Page(HTMLParser):
    """Collects what a self-contained page must not have and counts its pictures."""

    def __init__(self):
        super().__init__()
        self.svgs, self.external, self.open = 0, [], []

    def handle_starttag(self, tag, attrs):
        self.svgs += tag == "svg"
        self.external += [v for k, v in attrs if k in ("src", "href") and v and "://" in v]
        if tag not in ("meta", "input", "br", "circle", "line", "rect", "polyline"):
            self.open.append(tag)

    def handle_endtag(self, tag):
        if tag not in ("circle", "line", "rect", "polyline"):
            assert self.open.pop() == tag


def parse_page(text: str) -> Page:
    page = Page()
    page.feed(text)
    assert not page.open and not page.external
    return page


def test_parse_pictures_from_the_command_line(tiny_run, tmp_path):
    model = tiny_run / "best.pt"
    single = run("parse", "--model", model, "--format", "svg", "the dog ran")
    assert single.exit_code == 0, single.output
    assert svg_parts(single.output.strip())[1] == ["the", "dog", "ran"]
    (tmp_path / "in.txt").write_text("the dog ran\n\na cat saw the dog\n")
    folder = tmp_path / "svgs"
    result = run("parse", "--model", model, "--format", "svg", "--input", tmp_path / "in.txt", "--output", folder)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in folder.iterdir()) == ["000001.svg", "000003.svg"]
    assert svg_parts((folder / "000003.svg").read_text())[1] == "a cat saw the dog".split()
    html = tmp_path / "page.html"
    result = run("parse", "--model", model, "--model", model, "--format", "html", "--input", tmp_path / "in.txt",
                 "--output", html)
    assert result.exit_code == 0, result.output
    assert parse_page(html.read_text()).svgs == 2 * 3  # the combined tree and both members, per sentence


def test_evaluation_report_and_learning_curves_from_the_command_line(tiny_run, tmp_path):
    report = tmp_path / "report.html"
    result = run("evaluate", "--model", tiny_run / "best.pt", "--quiet", "--max-length", 8, "--report", report,
                 "--report-sentences", 5)
    assert result.exit_code == 0, result.output
    text = report.read_text()
    page = parse_page(text)
    assert page.svgs == 1 + 2 * 5  # the chart, then five sentences' predicted and gold trees
    assert "layer 2 forget *" in text and "right-branching" in text and "function sortBy" in text
    assert (tiny_run / "curves.svg").exists()
    ET.fromstring((tiny_run / "curves.svg").read_text())
    out = tmp_path / "both.svg"
    result = run("plot", tiny_run, tiny_run, "--output", out)
    assert result.exit_code == 0, result.output
    assert len(list(ET.fromstring(out.read_text()).iter(f"{SVG}polyline"))) == 4
    assert main.commands["plot"].params[0].required
