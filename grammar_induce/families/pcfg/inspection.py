"""What a TN-PCFG learned, read off its rule distributions: each symbol's share of the root rule and of the rules'
children, each nonterminal's most probable binary rules, each preterminal's most probable words. A rule's probability
p(A -> B C) = sum_r U[A, r] V[B, r] W[C, r] is computed a few parents at a time (the full rule tensor, (NT, NT + T,
NT + T), is never built). Symbols are named as everywhere else: `NT-k` for the nonterminals, `T-k` for the
preterminals."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .grammar import Grammar

PARENTS_AT_ONCE = 16  # nonterminals whose rule slices are made together: 16 x (NT + T)^2 floats


@dataclass(frozen=True)
class Symbol:
    """One symbol of the grammar. `root`: p(S -> it) (a preterminal: 0); `child`: its share of the binary rules'
    children (p(a child is it | the parent), averaged over the nonterminals and both sides); `rules`: a
    nonterminal's most probable rules (left, right, p); `words`: a preterminal's most probable words (word, p)."""

    name: str
    root: float
    child: float
    rules: tuple[tuple[str, str, float], ...] = ()
    words: tuple[tuple[str, float], ...] = ()


def symbol_name(k: int, nonterminals: int) -> str:
    return f"NT-{k}" if k < nonterminals else f"T-{k - nonterminals}"


@torch.no_grad()
def read_symbols(grammar: Grammar, vocab: list[str], top: int = 5) -> list[Symbol]:
    """Every nonterminal, then every preterminal, with its `top` rules or words."""
    # in float64: products of small probabilities are subnormal floats, on which a CPU's float32 products crawl (30x)
    g = Grammar(*(t.detach().double().cpu() for t in (grammar.root, grammar.emission, grammar.head, grammar.left,
                                                      grammar.right)))
    nt, m = g.head.shape[0], g.left.shape[0]
    child = ((g.head @ g.left.t() + g.head @ g.right.t()) / 2).mean(0)  # (NT + T,): sum_r U[A, r] V[s, r], per A
    rules = [_top_rules(g, parents, top) for parents in torch.arange(nt).split(PARENTS_AT_ONCE)]
    names = [symbol_name(k, nt) for k in range(m)]
    found = [Symbol(names[a], float(g.root[a]), float(child[a]),
                    tuple((names[b], names[c], p) for b, c, p in best))
             for a, best in enumerate(r for part in rules for r in part)]
    probabilities, words = g.emission.exp().topk(min(top, len(vocab)), dim=-1)
    return found + [Symbol(names[nt + t], 0.0, float(child[nt + t]),
                           words=tuple((vocab[w], p) for w, p in zip(words[t].tolist(), probabilities[t].tolist())))
                    for t in range(m - nt)]


def _top_rules(g: Grammar, parents: torch.Tensor, top: int) -> list[list[tuple[int, int, float]]]:
    """Each parent's `top` most probable rules B C (indices into the symbols) with their probabilities."""
    m = g.left.shape[0]
    weights = g.head[parents]  # (P, r)
    rules = ((weights[:, None, :] * g.left[None]).reshape(-1, g.left.shape[1]) @ g.right.t()).reshape(len(parents), m * m)
    probabilities, at = rules.topk(min(top, m * m), dim=-1)
    return [[(k // m, k % m, p) for k, p in zip(row_at.tolist(), row_p.tolist())]
            for row_at, row_p in zip(at, probabilities)]
