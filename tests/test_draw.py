
import itertools
import json
import math
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from grammar_induce import trees
from grammar_induce.cli import main
from grammar_induce.output import draw

from .conftest import (
    bar_titles,
    invoke,
    one_line_error,
    well_formed,
)
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


def test_a_chart_of_a_diverged_run_is_a_sane_picture():
    for values in ([(1, 4.3e116)], [(1, math.inf), (2, math.nan), (3, 5.0)], [(1, math.nan)], [(1, 2.0), (2, 2.0)]):
        svg = draw.line_chart({"run": values}, "epoch", "ppl")
        well_formed(svg)
        assert "nan" not in svg and "inf" not in svg


def test_pictures_draw_the_distances_and_layers_asked_for(tiny_run, tiny_backward_run):
    record = json.loads(invoke("parse", "--model", tiny_run / "best.pt", "--format", "jsonl", "a b c d").stdout)
    svg = invoke("parse", "--model", tiny_run / "best.pt", "--format", "svg", "--distance", "input", "a b c d").stdout
    assert bar_titles(svg, 2) == pytest.approx([round(d, 4) for d in record["input"][1]], abs=1e-4)
    models = ["--model", tiny_run / "best.pt", "--model", tiny_backward_run / "best.pt"]
    page = invoke("parse", *models, "--layer", "1", "--layer", "3", "--format", "html", "a b c d").stdout
    assert page.count("L1 *") == 1 and page.count("L3 *") == 1
    auto = invoke("parse", *models, "--layer", "auto", "--format", "jsonl", "a b c d", "b c d e")
    chosen = [m["layer"] for m in json.loads(auto.stdout.splitlines()[0])["members"]]
    assert f"--layer auto chose layer {chosen[0]} of" in auto.stderr
    page = invoke("parse", *models, "--layer", "auto", "--format", "html", "a b c d", "b c d e").stdout
    assert page.count(f"L{chosen[1]} *") >= 2  # the second member's mark, on both sentences


def test_plot_of_a_damaged_metrics_file(run_copy, tmp_path):
    metrics = run_copy / "metrics.jsonl"
    good = metrics.read_text().splitlines()
    metrics.write_bytes(good[0].encode() + b"\n\xff\xfe\n")
    one_line_error(invoke("plot", run_copy, "--output", tmp_path / "c.svg"), "metrics.jsonl:2: not UTF-8")
    metrics.write_text(good[0] + '\n{"epoch": 2}\n')
    one_line_error(invoke("plot", run_copy, "--output", tmp_path / "c.svg"), "metrics.jsonl:2: not a metrics record")
    record = json.loads(good[0])
    lines = [json.dumps({**record, "epoch": k, "valid_ppl": v, "train_loss": v}) for k, v in
             enumerate([5.0, math.nan, math.inf, 3.0], start=1)]
    metrics.write_text("\n".join(lines) + "\n")
    assert invoke("plot", run_copy, "--output", tmp_path / "c.svg").exit_code == 0
    svg = (tmp_path / "c.svg").read_text()
    well_formed(svg)
    assert "nan" not in svg.lower() and "inf" not in svg.lower()


def test_svg_output_is_well_formed_and_each_file_one_picture(tiny_run, tmp_path):
    model = ["--model", tiny_run / "best.pt", "--format", "svg"]
    result = invoke("parse", *model, "a \ufffe b \uffff c")
    assert result.exit_code == 0
    well_formed(result.stdout)
    one_line_error(invoke("parse", *model, "a \x07 b"), "control character U+0007")
    one_line_error(invoke("parse", *model, "a b", "c d"), "--format svg draws one sentence")
    assert invoke("parse", *model, "--output", tmp_path / "one.svg", "a b c").exit_code == 0
    well_formed((tmp_path / "one.svg").read_text())
    folder = tmp_path / "svgs"
    assert invoke("parse", *model, "--output", folder, "a b", "c d", "e f").exit_code == 0
    assert sorted(p.name for p in folder.iterdir()) == ["000001.svg", "000002.svg", "000003.svg"]
    assert invoke("parse", *model, "--output", folder, "a b").exit_code == 0
    assert sorted(p.name for p in folder.iterdir()) == ["000001.svg"]  # no stale pictures kept
    (folder / "notes.txt").write_text("mine")
    one_line_error(invoke("parse", *model, "--output", folder, "a b"), "holds files this output did not write (notes.txt)")
    assert (folder / "notes.txt").read_text() == "mine"
    one_line_error(invoke("parse", "--model", tmp_path / "missing.pt", "--format", "svg", "--output", tmp_path / "new", "a"))
    assert not (tmp_path / "new").exists()
    page = invoke("parse", "--model", tiny_run / "best.pt", "--format", "html", "a \ufffe b").stdout
    assert "\ufffe" not in page


def test_plot_legends_tell_runs_apart():
    labels = draw.legend_labels(["experiments/ptb-seed-1/forward-run", "experiments/ptb-seed-2/forward-run"])
    assert len(set(labels)) == 2 and all(len(label) <= 20 for label in labels)
    assert draw.legend_labels(["short"]) == ["short"]


def test_one_svg_goes_to_a_file_or_device_that_is_there_whatever_its_name(tiny_run, tmp_path):
    """`--output /dev/stdout` was refused as "a folder" (issue 70, class 13): a file or device that exists takes the
    one picture; a new name without .svg is still a folder of them."""
    from grammar_induce.output.pictures import one_file

    assert one_file(None) and one_file(Path("/dev/stdout")) and one_file(tmp_path / "a.svg")
    assert not one_file(tmp_path / "pictures") and not one_file(tmp_path)
    there = tmp_path / "picture.out"
    there.write_text("")
    done = invoke("parse", "--model", tiny_run / "best.pt", "--format", "svg", "--output", there, "a b c")
    assert done.exit_code == 0, done.output
    assert well_formed(there.read_text()).tag.endswith("svg")
    assert invoke("parse", "--model", tiny_run / "best.pt", "--format", "svg", "--output", "/dev/null",
                  "a b c").exit_code == 0
