"""How sure each bracket is (issue 72): a PCFG's confidences against brute force over every tree of a tiny grammar, an
ensemble's and an ON-LSTM's shares of the vote by hand, the calibration bins and the fitted map (isotonic) by hand,
and the numbers through jsonl, `evaluate` (its calibration table, `--calibrate`, `--calibration`), the pictures and
the API."""

import json
from dataclasses import replace

import pytest
import torch

from grammar_induce import api, trees
from grammar_induce.errors import InputError
from grammar_induce.families.pcfg.model import TNPCFG, Grammar
from grammar_induce.families.pcfg.settings import PCFGConfig
from grammar_induce.families.reading import Reading
from grammar_induce.inference.ensemble import ParseOptions, confidences
from grammar_induce.inference.maps import Calibration
from grammar_induce.metrics import calibration, calibration_error

from .conftest import invoke, one_line_error, tiny_config, well_formed
from .test_pcfg import tiny_pcfg  # noqa: F401 (a fixture)
from .test_rank_cfg import NT, R, T, V, brute_force, random_grammar


def test_a_pcfgs_confidence_is_each_spans_marginal_over_every_tree():
    """The tiny grammar of tests/test_rank_cfg.py in a TN-PCFG: each span of its MBR tree gets the probability, summed
    over every tree of the sentence, that the tree has it."""
    model = TNPCFG(V, PCFGConfig(nonterminals=NT, preterminals=T, rank=R, symbol_dim=4))
    g = random_grammar(3)
    model.grammar = lambda: Grammar(*(getattr(g, name).float() for name in ("root", "emission", "head", "left",
                                                                             "right")))
    sentences = [[3, 1, 4, 1, 5], [2, 6, 0]]
    rows = torch.tensor([[0, *s, *[0] * (6 - len(s))] for s in sentences[::-1]])  # sorted by length: the longest last
    words = [[f"w{k}" for k in s] for s in sentences[::-1]]
    for reading, ids in zip(model.read(rows, words, confidence=True), sentences[::-1]):
        weighted = brute_force(g, ids)
        z = sum(weighted.values())
        assert set(reading.confidence) == trees.spans(reading.parsed_tree, whole=True)
        for span, value in reading.confidence.items():
            assert value == pytest.approx(sum(p for spans, p in weighted.items() if span in spans) / z, abs=1e-4)
    assert all(r.confidence is None for r in model.read(rows, words))  # not asked for: none


def own(text: str) -> Reading:
    tree = trees.parse_brackets(text)
    return Reading(trees.leaves(tree), parsed_tree=tree)


def test_an_ensembles_confidence_is_each_spans_weighted_share_of_the_vote():
    a, b, c = own("((a b) (c d))"), own("(((a b) c) d)"), own("(a (b (c d)))")
    tree = trees.parse_brackets("((a b) (c d))")
    options = ParseOptions(weights=(1.0, 2.0, 0.5), right_voter=0.5)  # the right-branching voter has (2, 4), (1, 4)
    found = confidences([a, b, c], [1, 1, 1], options, tree)
    total = 1 + 2 + 0.5 + 0.5
    assert found == pytest.approx({(0, 4): 1.0, (0, 2): (1 + 2) / total, (2, 4): (1 + 0.5 + 0.5) / total})
    mean = confidences([a, b, c], [1, 1, 1], replace(options, combine="mean"), tree)  # no weights, no right voter
    assert mean == pytest.approx({(0, 4): 1.0, (0, 2): 2 / 3, (2, 4): 2 / 3})
    mapped = confidences([a, b, c], [1, 1, 1], replace(options, calibration=Calibration((0.5, 1.0), (0.1, 0.9))), tree)
    assert mapped == pytest.approx({(0, 4): 1.0, (0, 2): 0.9, (2, 4): 0.1})  # the whole sentence: in every tree


def test_an_onlstms_confidence_is_the_share_of_its_layers_and_a_structformer_alone_has_none():
    """Three layers of distances (the paper's decoder splits at the largest): layer trees ((a b) (c d)) twice and
    (a (b (c d))) once."""
    split_middle, split_first = [0.0, 1.0, 3.0, 1.0], [0.0, 3.0, 2.0, 1.0]
    reading = Reading(list("abcd"), {"forget": [split_middle, split_middle, split_first]})
    tree = reading.tree(1)
    assert trees.spans(tree) == {(0, 2), (2, 4)}
    assert confidences([reading], [1], ParseOptions(), tree) == pytest.approx({(0, 4): 1.0, (0, 2): 2 / 3,
                                                                               (2, 4): 1.0})
    one_layer = Reading(list("abcd"), {"forget": [split_middle]})
    assert confidences([one_layer], [1], ParseOptions(), tree) is None


def test_calibration_bins_and_the_expected_error_by_hand():
    scored = [(0.05, False), (0.95, True), (0.95, False), (1.0, True), (0.55, True)]
    bins = calibration(scored)
    assert [(b.low, b.brackets) for b in bins] == [(0.0, 1), (0.5, 1), (0.9, 3)]  # 1.0 falls in the last bin
    last = bins[-1]
    assert last.mean_confidence == pytest.approx((0.95 + 0.95 + 1.0) / 3) and last.gold_share == pytest.approx(2 / 3)
    expected = (1 * 0.05 + 1 * 0.45 + 3 * abs(2 / 3 - 2.9 / 3)) / 5
    assert calibration_error(bins) == pytest.approx(expected)


def test_the_fitted_map_is_isotonic_and_reads_back(tmp_path):
    fitted = Calibration.fit([(0.1, False), (0.2, True), (0.3, False), (0.9, True), (0.9, False)], "gold.mrg")
    assert fitted.tops == (0.1, 0.9) and fitted.values == (0.0, 0.5)  # (0.2, 0.3) pooled (a violation), then 0.9 (a tie)
    assert [fitted(c) for c in (0.0, 0.1, 0.25, 0.5, 0.95)] == [0.0, 0.0, 0.5, 0.5, 0.5]
    path = tmp_path / "map.json"
    path.write_text(fitted.to_json())
    assert Calibration.read(path) == fitted
    path.write_text('{"steps": []}')
    with pytest.raises(InputError, match=r"map.json: not a calibration file \(grammar-induce evaluate --calibrate"):
        Calibration.read(path)


def test_confidences_in_jsonl_the_api_evaluate_and_the_pictures(tiny_pcfg, tmp_path):  # noqa: F811
    model, sentence = str(tiny_pcfg), "the old man saw a dog"
    plain = invoke("parse", "--model", model, sentence)
    assert plain.exit_code == 0 and "confidence" not in plain.output  # brackets: off by default
    record = json.loads(invoke("parse", "--model", model, "--format", "jsonl", sentence).output)
    spans = {(s["start"], s["end"]): s["confidence"] for s in record["spans"]}
    assert set(spans) == trees.spans(record["tree"], whole=True) and spans[0, 6] == pytest.approx(1.0, abs=1e-3)
    result = api.load(model, confidence=True).analyse(sentence)
    assert {(s.start, s.end): round(s.confidence, 4) for s in result.spans} == spans
    svg = invoke("parse", "--model", model, "--format", "svg", sentence).output
    drawn = {tuple(map(int, c.get("data-span").split())): float(c.get("data-confidence"))
             for c in well_formed(svg).iter("{http://www.w3.org/2000/svg}circle") if c.get("data-confidence")}
    assert drawn == pytest.approx(spans, abs=1e-4)

    gold = tiny_config().data.valid.replace(".txt", ".trees")
    report = api.evaluate(api.load(model), gold)
    assert sum(b.brackets for b in report.calibration) == report.rows[report.main_row].predicted
    fitted = tmp_path / "map.json"
    done = invoke("evaluate", "--model", model, "--gold", gold, "--calibrate", str(fitted), "--json",
                  str(tmp_path / "r.json"))
    assert done.exit_code == 0 and "calibration of pcfg" in done.output and "expected calibration error" in done.output
    assert json.loads((tmp_path / "r.json").read_text())["calibration"]["bins"]
    mapped = json.loads(invoke("parse", "--model", model, "--format", "jsonl", "--calibration", str(fitted),
                               sentence).output)
    the_map = Calibration.read(fitted)
    assert [s["confidence"] for s in mapped["spans"]] == pytest.approx([the_map(s["confidence"]) for s in
                                                                        record["spans"]], abs=1e-3)
    checked = api.evaluate(api.load(model, calibration=fitted), gold)  # on the trees it was fitted on: calibrated
    assert calibration_error(checked.calibration) == pytest.approx(0.0, abs=1e-4)


def test_maps_are_tied_to_the_model_they_were_fitted_on_and_checked_when_read(tmp_path):
    """issue 81, class 4: a calibration or label map records its models' fingerprints; another model's is refused
    naming both unless --map-any-model (then a note); a map that does not record them is used with a note; a
    non-decreasing map and PTB-safe labels are checked; calibrated output says so; the whole sentence stays sure."""
    import grammar_induce as gi
    from grammar_induce.families import pretrained
    from grammar_induce.inference.maps import Fitted, LabelMap

    shipped = pretrained.MODELS_DIR / "ptb-pcfg.pt"
    fitted = Fitted.of([shipped])
    calibration = tmp_path / "m.json"
    calibration.write_text(Calibration((0.5, 1.0), (0.2, 0.7), "gold.trees", fitted).to_json())
    text = "The old man saw a dog ."
    record = json.loads(invoke("parse", "--model", "ptb-pcfg", "--calibration", calibration, "--format", "jsonl",
                               text).stdout)
    assert record["calibrated"] == "gold.trees"
    whole = next(s for s in record["spans"] if (s["start"], s["end"]) == (0, len(record["words"])))
    assert whole["confidence"] == 1.0 and {s["confidence"] for s in record["spans"]} <= {0.2, 0.7, 1.0}
    plain = json.loads(invoke("parse", "--model", "ptb-pcfg", "--format", "jsonl", text).stdout)
    assert "calibrated" not in plain
    refused = invoke("parse", "--model", "en", "--calibration", calibration, text)
    one_line_error(refused, f"calibration {calibration}: fitted on ptb-pcfg.pt (shipped), not on en.pt (shipped)",
                   "--map-any-model")
    anyway = invoke("parse", "--model", "en", "--calibration", calibration, "--map-any-model", text)
    assert anyway.exit_code == 0 and "used anyway (--map-any-model)" in anyway.stderr
    with pytest.raises(InputError, match="--map-any-model uses it anyway"):
        gi.load("zh", label_map="ptb-pcfg")
    unknown = tmp_path / "old.json"
    unknown.write_text(json.dumps({k: v for k, v in json.loads(calibration.read_text()).items() if k != "fitted_to"}))
    assert any("does not say which model" in n for n in gi.load("en", calibration=unknown).messages.notes)

    bad = json.loads(calibration.read_text()) | {"steps": [[0.5, 0.6], [1.0, 0.3]]}
    calibration.write_text(json.dumps(bad))
    one_line_error(invoke("parse", "--model", "ptb-pcfg", "--calibration", calibration, text),
                   "not a non-decreasing map")
    labels = tmp_path / "labels.json"
    labels.write_text(LabelMap({"NT-19": "S (X"}, fitted).to_json("gold.trees"))
    one_line_error(invoke("parse", "--model", "ptb-pcfg", "--label-map", labels, text),
                   "NT-19 is mapped to 'S (X', which PTB brackets cannot carry")


def test_parse_never_writes_its_output_over_its_own_maps(tmp_path):
    """issue 81, class 2: --output naming the --calibration or --label-map file read is refused; both are kept."""
    from grammar_induce.families import pretrained
    from grammar_induce.inference.maps import Fitted, LabelMap

    fitted = Fitted.of([pretrained.MODELS_DIR / "ptb-pcfg.pt"])
    calibration, labels = tmp_path / "m.json", tmp_path / "l.json"
    calibration.write_text(Calibration((1.0,), (0.5,), "g", fitted).to_json())
    labels.write_text(LabelMap({"NT-1": "NP"}, fitted).to_json("g"))
    kept = calibration.read_text(), labels.read_text()
    for flag, path in (("--calibration", calibration), ("--label-map", labels)):
        done = invoke("parse", "--model", "ptb-pcfg", flag, path, "--output", path, "a b c")
        assert done.exit_code != 0 and str(path) in done.output
    assert (calibration.read_text(), labels.read_text()) == kept
