"""Span voting (inference/voting.py)."""

import pytest

from grammar_induce.errors import SettingError
from grammar_induce.inference import voting

from .conftest import invoke


def test_span_voting_past_its_exact_limit_is_greedy_and_says_so(tiny_run, tiny_backward_run, monkeypatch):
    words = [f"w{k}" for k in range(30)]
    members = [voting.trees.balanced(words), voting.trees.right_branching(words)]
    exact = voting.most_voted_tree(members)
    monkeypatch.setattr(voting.cky, "EXACT_LIMIT", 10)
    greedy = voting.most_voted_tree(members)
    assert voting.trees.leaves(greedy) == words and sorted(voting.trees.spans(greedy)) != []
    assert sum(s in voting.trees.spans(m) for m in members for s in voting.trees.spans(greedy)) <= \
        sum(s in voting.trees.spans(m) for m in members for s in voting.trees.spans(exact))
    result = invoke("parse", "--model", tiny_run / "best.pt", "--model", tiny_backward_run / "best.pt", " ".join(words), "a b")
    assert result.exit_code == 0 and "1 line of more than 10 words: span voting split them greedily" in result.stderr


def test_the_marginal_sum_ensemble_decodes_the_weighted_mean_of_the_members_charts():
    """Hand-computed: two members over three words, each sure of the whole sentence. Equal weights: (0, 2) has
    (0.8 + 0.1) / 2 = 0.45 and (1, 3) has (0.2 + 0.9) / 2 = 0.55, so the right-branching tree; weights 3 and 1:
    (0, 2) has (2.4 + 0.1) / 4 = 0.625 against 0.375, the left-branching tree."""
    import torch

    from grammar_induce.families.reading import Reading
    from grammar_induce.inference.ensemble import ParseOptions, combine, confidences

    words = ["a", "b", "c"]

    def member(left: float) -> Reading:
        chart = torch.zeros(4, 4)
        chart[0, 2], chart[1, 3], chart[0, 3] = left, 1 - left, 1.0
        return Reading(words, parsed_tree=["a", ["b", "c"]], marginals=chart)

    members = [member(0.8), member(0.1)]
    even = ParseOptions(combine="marginals")
    assert combine([members], [1, 1], even) == [["a", ["b", "c"]]]
    shares = confidences(members, [1, 1], even, ["a", ["b", "c"]])
    assert shares.keys() == {(1, 3), (0, 3)}
    assert abs(shares[1, 3] - 0.55) < 1e-6 and abs(shares[0, 3] - 1.0) < 1e-6
    weighed = ParseOptions(combine="marginals", weights=(3.0, 1.0))
    assert combine([members], [1, 1], weighed) == [[["a", "b"], "c"]]
    assert abs(confidences(members, [1, 1], weighed, [["a", "b"], "c"])[0, 2] - 0.625) < 1e-6
    without = Reading(words, {"forget": [[0.1, 0.2, 0.3]]})
    with pytest.raises(SettingError, match="marginals sums the members' span marginals"):
        combine([[members[0], without]], [1, 1], even)
