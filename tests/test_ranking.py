"""The gold-free ranking of an ensemble's members (inference/ensemble.rank_members): values on members whose
agreement is known by construction, `--weights auto` using it, and the `rank` command."""

from pathlib import Path

import pytest

import grammar_induce as gi
from grammar_induce import trees
from grammar_induce.inference.ensemble import rank_members
from grammar_induce.messages import Messages

from .conftest import SYNTHETIC_GOLD, invoke, tiny_config
from .test_pcfg import tiny_pcfg  # noqa: F401 (a fixture)

PAIRED = trees.parse_brackets("((a b) (c d))")  # spans (0, 2), (2, 4)
RIGHT = trees.parse_brackets("(a (b (c d)))")  # right-branching: spans (1, 4), (2, 4); F1 against PAIRED 0.5


def test_a_member_agreeing_with_the_other_family_beyond_right_branching_leads():
    """A1 = PAIRED and A2 = RIGHT (family a) against B1 = PAIRED (family b): peers are the other family's members.
    A1 agrees 1.0 with B1, where right-branching trees agree 0.5: lead 0.5, weight 1. A2 agrees 0.5: no lead, weight
    0. B1 agrees (1 + 0.5) / 2 with A1 and A2, as right-branching trees do ((0.5 + 1) / 2): weight 0."""
    a1, a2, b1 = rank_members([[PAIRED, RIGHT, PAIRED]] * 3, ["a", "a", "b"])
    assert (a1.agreement, a1.baseline, a1.lead, a1.weight) == (1.0, 0.5, 0.5, 1.0)
    assert (a2.agreement, a2.baseline, a2.weight) == (0.5, 0.5, 0.0)
    assert (b1.agreement, b1.baseline, b1.weight) == (0.75, 0.75, 0.0)
    assert {s.peers for s in (a1, a2, b1)} == {"other families"}


def test_one_family_ranks_against_every_other_member_and_no_lead_weighs_each_one():
    standings = rank_members([[PAIRED, PAIRED, RIGHT]], ["a", "a", "a"])
    assert [s.peers for s in standings] == ["other members"] * 3
    assert [(s.agreement, s.baseline) for s in standings] == [(0.75, 0.75), (0.75, 0.75), (0.5, 0.5)]
    assert [s.weight for s in standings] == [1.0, 1.0, 1.0]  # nobody beats right-branching trees: equal votes


def test_weights_are_leads_scaled_to_the_best():
    left = trees.parse_brackets("(((a b) c) d)")  # spans (0, 2), (0, 3): F1 0.5 against PAIRED, 0 against RIGHT
    standings = rank_members([[PAIRED, left, PAIRED, PAIRED]], ["a", "a", "b", "b"])
    assert standings[0].lead == 0.5 and standings[1].lead == 0.0
    assert [s.weight for s in standings[:2]] == [1.0, 0.0]


LINES = ["the old man saw a dog", "a dog saw the man", "the man saw the old dog and a cat", "a cat ran"]


def test_weights_auto_votes_with_the_ranking_of_the_first_chunk(tiny_run, tiny_backward_run, tmp_path):
    from grammar_induce.inference.parsing import standings

    models = [str(tiny_run / "best.pt"), str(tiny_backward_run / "best.pt")]
    parser = gi.load(*models, weights="auto", layer=(1, 2))
    ranked = standings(parser.models, LINES, parser.options)
    chosen = tuple(s.weight for s in ranked.standings)
    assert max(chosen) == 1.0 or chosen == (1.0, 1.0)
    by_hand = gi.load(*models, weights=chosen, layer=(1, 2))
    assert [str(t) for t in parser.parse_many(LINES)] == [str(t) for t in by_hand.parse_many(LINES)]
    result = invoke("parse", "--model", models[0], "--model", models[1], "--layer", "1", "--layer", "2",
                    "--weights", "auto", *LINES)
    assert result.exit_code == 0, result.output
    assert f"--weights auto weighed {models[0]} {chosen[0]:.2f}, {models[1]} {chosen[1]:.2f}" in result.stderr


def test_evaluate_says_what_weights_auto_chose(tiny_run, tiny_backward_run):
    models = [str(tiny_run / "best.pt"), str(tiny_backward_run / "best.pt")]
    report = gi.evaluate(gi.load(*models, weights="auto", layer=(1, 2)), SYNTHETIC_GOLD)
    said = [note for note in report.notes if note.startswith("--weights auto weighed")]
    weights = [float(part.rsplit(" ", 1)[1]) for part in said[0].split(" (")[0].removeprefix(
        "--weights auto weighed ").split(", ")]
    assert len(said) == 1 and len(weights) == 2 and max(weights) == 1.0
    assert not [n for n in gi.evaluate(gi.load(*models, layer=(1, 2)), SYNTHETIC_GOLD).notes if "weighed" in n]


def test_the_rank_command_prints_each_model_best_first(tiny_run, tiny_backward_run, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("\n".join(LINES) + "\n")
    models = [str(tiny_run / "best.pt"), str(tiny_backward_run / "best.pt")]
    result = invoke("rank", "--model", models[0], "--model", models[1], "--input", text)
    assert result.exit_code == 0, result.output
    rows = result.stdout.splitlines()
    assert rows[0].split() == ["rank", "model", "kind", "layer", "agreement", "right-branching", "lead", "weight"]
    leads = [float(row.split()[6]) for row in rows[1:3]]
    assert leads == sorted(leads, reverse=True) and {row.split()[1] for row in rows[1:3]} == set(models)
    assert "(other members)" in result.stdout
    one = invoke("rank", "--model", models[0], "--input", text)
    assert one.exit_code == 2 and "give two or more --model" in one.output


@pytest.mark.parametrize("weights", ["auto", "family"])
def test_weights_by_rule_with_one_model_vote_alone(tiny_run, weights):
    parser = gi.load(str(tiny_run / "best.pt"), weights=weights)
    assert parser.parse("the old man saw a dog").leaves() == "the old man saw a dog".split()


def test_distill_with_weights_auto_records_the_weights_it_chose(tiny_run, tiny_backward_run, tmp_path):
    from grammar_induce.families import checkpoint

    from .conftest import tiny_config

    models = [str(tiny_run / "best.pt"), str(tiny_backward_run / "best.pt")]
    student = gi.distill(*models, train=tiny_config().data.train, valid=tiny_config().data.valid, out=tmp_path / "s",
                         weights="auto", epochs=1, log=None)
    made = checkpoint.load(student.models[0].source).provenance
    assert len(made["weights"]) == 2 and max(made["weights"]) == 1.0 and min(made["weights"]) >= 0


def test_auto_chooses_on_the_same_lines_however_they_arrive_and_the_parser_keeps_its_choice(tiny_run, tiny_backward_run,
                                                                                            tiny_pcfg):  # noqa: F811
    """A stream goes a batch at a time: `auto` chose on its first batch (in the API, on each `parse` call's one
    sentence); now it chooses on a chunk's lines however they come, and the parser keeps what it chose (issue 70,
    class 2)."""
    lines = [line for line in Path(tiny_config().data.valid).read_text().splitlines() if line.strip()][:40]
    models = [tiny_run / "best.pt", tiny_backward_run / "best.pt", tiny_pcfg]
    whole = gi.load(*models, weights="auto", layer="auto", batch_size=2)  # the same batches: the same floats
    listed = [str(t) for t in whole.parse_many(lines)]
    streamed = gi.load(*models, weights="auto", layer="auto", batch_size=2)
    assert [str(t) for t in streamed.parse_many(iter(lines))] == listed  # a batch of 2 at a time
    assert streamed.members.options.weights == whole.members.options.weights
    assert streamed.members.options.layers == whole.members.options.layers
    kept = streamed.members
    assert any(note.startswith("--weights auto weighed ") for note in streamed.messages.notes)  # the API says it too
    streamed.parse(lines[0])
    assert streamed.members is kept  # chosen once: a later call does not choose again on its one sentence
    said = Messages()
    results, _ = gi.load(*models, weights="auto").run([lines[0]], messages=said)
    list(results)
    assert any("auto chose the voting weights on 1 line, all there were" in note for note in said.notes)
    parser = gi.load(*models, weights="auto")
    parser.parse(lines[0])  # a one-sentence call says it chose on one line where the notes are kept (issue 81, 12)
    assert any("auto chose the voting weights on 1 line, all there were" in note for note in parser.messages.notes)


def test_rank_takes_a_shipped_pair_and_says_how_to_fix_its_choice(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("the old man saw a dog .\nprofits rose sharply in the third quarter .\n")
    ranked = invoke("rank", "--model", "ptb-pair", "--input", str(text))
    assert ranked.exit_code == 0, ranked.output
    fixed = ranked.output.strip().splitlines()[-1]
    assert fixed.startswith("to parse with these, whatever the text: --layer ")
    weights = fixed.split("--weights ")[1].split()[0]
    assert max(float(w) for w in weights.split(",")) == 1.0
    assert fixed.endswith(" --decoder gap")  # issue 81, class 12: its decoder too (ptb-pair's own)
    again = invoke("parse", "--model", "ptb-pair", *fixed.split(": ", 1)[1].split(), "the old man saw a dog .")
    assert again.exit_code == 0 and again.output.count("(") == 6
