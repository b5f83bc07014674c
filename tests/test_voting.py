"""Span voting (inference/voting.py)."""

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
