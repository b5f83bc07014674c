"""A neural PCFG with many symbols through a low-rank binary rule tensor: TN-PCFG (Yang, Zhao and Tu, "PCFGs
Can Do Better: Inducing Probabilistic Context-Free Grammars with Many Symbols", NAACL 2021).

The grammar (the paper's section 3; symbols are m = NT nonterminals then T preterminals):

    p(S -> A)      = softmax_A(root_mlp(s_root))                      (root, over the NT nonterminals)
    p(T -> w)      = softmax_w(term_mlp(s_T))                         (emission, over the vocabulary)
    p(A -> B C)    = sum_r U[A, r] V[B, r] W[C, r]                    (eq. 5: the rank-r decomposition)
    U = softmax_r(f_U(E_NT)),  V = softmax_B(f_V(E)),  W = softmax_C(f_W(E))      (eq. 7)

U's rows sum to one over the rank and V's, W's columns over the symbols, so sum_{B,C} p(A -> B C) = sum_r U[A, r]
= 1: the grammar is a proper PCFG, and the m x m x m tensor is never built. There are no unary chains: a
preterminal emits one word, a nonterminal rewrites to two symbols.

The model keeps the grammar; the sums over trees are a structure's (structures/rank_cfg.py: the inside pass in the
rank space, the outside pass written out, span marginals, the MBR tree the paper evaluates, and each span's most
probable nonterminal, the induced label `NT-17`).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ... import trees
from ...config import ConfigError
from ...structures.rank_cfg import RankSpaceCFG
from ...structures.tree_crf import span_values, stacked
from ..family import Family, GrammarTools, Yields
from ..kind import ModelKind
from ..reading import Reading
from ..sentences import SentenceRecipe
from .emission import word_log_probs
from .grammar import Grammar
from .settings import PCFGConfig, PCFGTrainConfig

PARSE_LIMIT = 150  # words: a longer line is parsed in pieces (its chart would grow with the length squared)
BUILDING = threading.Lock()  # a parse's grammar is built by one thread at a time
CHART_BYTES = 1 << 28  # parsing: the charts of this many bytes at a time, with their gradients (a part of a batch)

class ResLayer(nn.Module):
    """x + relu(W2 relu(W1 x)): the residual block of the paper's MLPs (after Kim et al. 2019)."""

    def __init__(self, dim: int):
        super().__init__()
        self.linear = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim), nn.ReLU())

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x) + x


def residual_mlp(dim: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, dim), ResLayer(dim), ResLayer(dim), nn.Linear(dim, out))


class TNPCFG(ModelKind):
    """`nonterminals`, `preterminals`, `rank` and `symbol_dim` of the model config (the paper: 250, 500, 500,
    256)."""

    ADAPTS = frozenset({"rank"})  # a trained grammar of a higher rank starts one of a lower (`adopt`)

    def __init__(self, vocab_size: int, config: PCFGConfig):
        super().__init__()
        nt, t, r, s = config.nonterminals, config.preterminals, config.rank, config.symbol_dim
        self.nt, self.t = nt, t
        self.root_emb = nn.Parameter(torch.randn(1, s))
        self.root_mlp = residual_mlp(s, nt)
        self.term_emb = nn.Parameter(torch.randn(t, s))
        self.term_mlp = residual_mlp(s, vocab_size)
        self.symbol_emb = nn.Parameter(torch.randn(nt + t, s))
        self.head_mlp = nn.Sequential(nn.Linear(s, s), nn.ReLU(), nn.Linear(s, r))
        self.left_mlp = nn.Sequential(nn.Linear(s, s), nn.ReLU(), nn.Linear(s, r))
        self.right_mlp = nn.Sequential(nn.Linear(s, s), nn.ReLU(), nn.Linear(s, r))
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_normal_(p)
        self._built: tuple[tuple, Grammar] | None = None  # see built_grammar

    def adopt(self, state: dict[str, Tensor], theirs: dict) -> dict[str, Tensor]:
        """A trained grammar of a higher rank as this one's start: the rank components it uses most (the largest sums
        of U over the nonterminals; each component's V and W columns are distributions over the symbols, so U[A, k] is
        the share of A's rules that come through component k) kept, U renormalised over them by its softmax, V and W
        as they were. Everything else is the grammar's own."""
        rank = self.head_mlp[2].out_features
        if theirs.get("rank", rank) == rank:
            return state
        if theirs["rank"] < rank:
            raise ConfigError(f"train.init has rank {theirs['rank']}: a grammar starts from one of its rank or higher, "
                              f"not lower (the run's model.rank is {rank})")
        with torch.no_grad():
            symbols = state["symbol_emb"][: self.nt]  # (NT, s)
            hidden = nn.functional.relu(nn.functional.linear(symbols, state["head_mlp.0.weight"], state["head_mlp.0.bias"]))
            u = nn.functional.linear(hidden, state["head_mlp.2.weight"], state["head_mlp.2.bias"]).softmax(-1)  # (NT, R)
        kept = u.sum(0).topk(rank).indices.sort().values  # (r,) the components kept, in their order
        adopted = dict(state)
        for name in ("head_mlp", "left_mlp", "right_mlp"):
            adopted[f"{name}.2.weight"] = state[f"{name}.2.weight"][kept]
            adopted[f"{name}.2.bias"] = state[f"{name}.2.bias"][kept]
        return adopted

    def built_grammar(self) -> Grammar:
        """The grammar for parsing, built once for as long as the weights are unchanged (its MLPs and the emission's
        softmax over the vocabulary are a tenth of a parse when built again for every batch); by one thread while
        others wait (two lanes' first batches ask at once: runtime/threads.py)."""
        stamp = tuple((p.data_ptr(), p._version) for p in self.parameters())  # a step of training changes a version
        with BUILDING:
            if self._built is None or self._built[0] != stamp:
                with torch.no_grad():
                    self._built = (stamp, self.grammar())
            return self._built[1]

    def rules(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """p(S -> A) (NT,), U (NT, r), V and W (NT + T, r): the grammar but its emission."""
        symbols = self.symbol_emb
        return (self.root_mlp(self.root_emb).softmax(-1).squeeze(0), self.head_mlp(symbols[: self.nt]).softmax(-1),
                self.left_mlp(symbols).softmax(0), self.right_mlp(symbols).softmax(0))

    def grammar(self) -> Grammar:
        root, head, left, right = self.rules()
        return Grammar(root, self.term_mlp(self.term_emb).log_softmax(-1), head, left, right)

    def structure(self, words: Tensor, lengths: Sequence[int], products: torch.dtype | None = None,
                  grammar: Grammar | None = None, span_bias: Tensor | None = None, keep: Tensor | None = None
                  ) -> RankSpaceCFG:
        """The sentences `words` (B, n) ids padded at the end under the grammar, as a structure (its partition, span
        marginals, MBR trees and labels). `products`: the dtype of the rank-space products and the emission's (None:
        float32); `grammar`: the rules built before (None: built here, with their gradients, the emission read at the
        words alone: emission.py); `span_bias` (B, n+1, n+1): each span's log weight, as parse-focusing trains (None:
        the plain grammar); `keep` (B, n+1, n+1): chart constraints (None: every span)."""
        if grammar is None:
            root, head, left, right = self.rules()
            last = self.term_mlp[-1]
            emission = word_log_probs(self.term_mlp[:-1](self.term_emb), last.weight, last.bias, words, products)
        else:
            root, head, left, right = grammar.root, grammar.head, grammar.left, grammar.right
            emission = grammar.word_leaves(products).at(words)  # the words' rows of the vocabulary's leaves
        return RankSpaceCFG(root, head, left, right, emission, lengths, products, span_bias, keep)

    def log_likelihood(self, words: Tensor, lengths: Sequence[int], products: torch.dtype | None = None,
                       span_bias: Tensor | None = None) -> Tensor:
        """log p(sentence) under the grammar, per sentence (B,); with `span_bias`, the log of the sum over trees of
        p(tree, sentence) exp(sum of its spans' biases): the focused objective."""
        return self.structure(words, lengths, products, span_bias=span_bias).partition

    @torch.no_grad()
    def read(self, tokens: Tensor, words: Sequence[Sequence[str]], n_layers: int | None = None,
             products: torch.dtype | None = None, confidence: bool = False, marginals: bool = False,
             keep: Sequence[Tensor] | None = None, labels: bool = False, kept_mass: bool = False) -> list[Reading]:
        """Each sentence's MBR tree over its span marginals, (`labels`) each span of it labelled with its most
        probable nonterminal (`NT-k`) and (`confidence`) given its marginal; (`marginals`) every span's marginal, a chart
        (a sentence parsed in pieces: each piece's, the spans across pieces 0). `keep`: each sentence's chart
        constraints (n+1, n+1) booleans, the spans its sums may use (inference/pruning.py; None: every span);
        `kept_mass`: with `keep`, the share of each sentence's probability its kept spans carry (an inside pass over
        the whole chart too: Z kept / Z). A sentence of more than PARSE_LIMIT words is
        parsed in pieces of at most PARSE_LIMIT words (as near equal as can be), their trees joined by a balanced
        tree (its nodes unlabelled), so that no tree is deeper than a piece's and a few levels. The rows are
        `<eos> w1 ... wn <eos>`, sorted by length (the longest last)."""
        g = self.built_grammar()
        cuts = [_pieces(len(w)) for w in words]
        pieces = [(k, start, end) for k, bounds in enumerate(cuts) for start, end in bounds]
        pieces.sort(key=lambda piece: piece[2] - piece[1])
        found: dict[tuple[int, int], Piece] = {}
        for part in self._parts(list(range(len(pieces))), [range(s, e) for _, s, e in pieces], g.head.shape[1]):
            lengths = [pieces[p][2] - pieces[p][1] for p in part]
            ids = torch.stack([_padded(tokens[k, 1 + s : 1 + e], max(lengths)) for k, s, e in map(pieces.__getitem__, part)])
            constraints = None if keep is None else stacked([keep[k][s : e + 1, s : e + 1]
                                                             for k, s, e in map(pieces.__getitem__, part)])
            structure = self.structure(ids.to(self.device), lengths, products, g, keep=constraints)
            piece_words = [list(words[k][s:e]) for k, s, e in map(pieces.__getitem__, part)]
            best = structure.argmax(piece_words)  # MBR: the most expected spans
            charts = structure.marginals.cpu() if confidence or marginals else None
            named = structure.labels(best) if labels else [None] * len(best)
            log_kept = [None] * len(best)
            if kept_mass and constraints is not None:  # Z over the whole chart too: the same words, grammar, precision
                whole = self.structure(ids.to(self.device), lengths, products, g)
                log_kept = (structure.partition.double() - whole.partition.double()).clamp(max=0).tolist()
            for b, (p, tree, nts) in enumerate(zip(part, best, named)):
                n = lengths[b]
                found[pieces[p][:2]] = Piece(tree, None if nts is None else {span: f"NT-{a}" for span, a in nts.items()},
                                             span_values(charts[b], tree) if confidence else None,
                                             charts[b, : n + 1, : n + 1] if marginals else None, log_kept[b])
        return [_joined(list(w), [found[k, s] for s, _ in bounds], [s for s, _ in bounds], confidence, marginals, labels)
                for k, (w, bounds) in enumerate(zip(words, cuts))]

    @staticmethod
    def _parts(rows: list[int], words: Sequence[Sequence[str]], rank: int) -> list[list[int]]:
        """`rows` (sorted by length) in parts whose charts, with their gradients, fit in CHART_BYTES."""
        parts: list[list[int]] = []
        for k in rows:
            if parts and (len(parts[-1]) + 1) * 16 * rank * (len(words[k]) + 1) ** 2 <= CHART_BYTES:
                parts[-1].append(k)
            else:
                parts.append([k])
        return parts


def _pieces(n: int) -> list[tuple[int, int]]:
    """A sentence of n words as pieces of at most PARSE_LIMIT words, as near equal as can be: (start, end) each."""
    count = -(-n // PARSE_LIMIT)
    bounds = [round(k * n / count) for k in range(count + 1)]
    return list(itertools.pairwise(bounds))


def _padded(ids: Tensor, length: int) -> Tensor:
    return torch.cat([ids, ids.new_zeros(length - len(ids))])


@dataclass
class Piece:
    """What the grammar found in a piece of a sentence: its tree and, where asked, its spans' labels, their marginals
    and the piece's chart of every span's marginal."""

    tree: trees.Tree
    labels: dict[tuple[int, int], str] | None
    confidence: dict[tuple[int, int], float] | None
    chart: Tensor | None
    log_kept: float | None = None  # log(Z kept / Z) under chart constraints, where asked


def _joined(words: list[str], parts: list[Piece], starts: list[int], confidence: bool, marginals: bool,
            labels: bool) -> Reading:
    """A sentence's reading from its pieces' trees, labels, confidences and charts (shifted to the sentence's
    words)."""
    kept = None if parts[0].log_kept is None else math.exp(sum(part.log_kept for part in parts))  # pieces: independent
    if len(parts) == 1:
        one = parts[0]
        return Reading(words, parsed_tree=one.tree, labels=one.labels, confidence=one.confidence, marginals=one.chart,
                       kept_mass=kept)
    named = None if not labels else {(i + s, j + s): v for part, s in zip(parts, starts) for (i, j), v in part.labels.items()}
    sure = None if not confidence else {(i + s, j + s): v for part, s in zip(parts, starts)
                                        for (i, j), v in part.confidence.items()}  # the joining nodes: none (0)
    chart = None
    if marginals:  # each piece's chart on the diagonal; the spans across pieces (the joining nodes') 0
        chart = torch.zeros(len(words) + 1, len(words) + 1)
        for part, s in zip(parts, starts):
            n = part.chart.shape[0]
            chart[s : s + n, s : s + n] = part.chart
    return Reading(words, parsed_tree=trees.balanced([part.tree for part in parts]), labels=named, confidence=sure,
                   marginals=chart, kept_mass=kept)


LONGER_LINES = "parsed them in pieces of at most that many words, joined by a balanced tree (its chart grows with " \
               "the square of the length)"


def _samples(grammar: Grammar, vocab: list[str], generator: torch.Generator, max_length: int = 40) -> Iterator:
    """sampling.samples, loaded when first drawn from (a parse never loads it)."""
    from .sampling import samples

    return samples(grammar, vocab, generator, max_length)


def _symbols(grammar: Grammar, vocab: list[str], top: int = 5) -> list:
    """inspection.read_symbols, loaded when first read."""
    from .inspection import read_symbols

    return read_symbols(grammar, vocab, top)


FAMILY = Family(
    "pcfg", "a TN-PCFG", TNPCFG, PCFGConfig, PCFGTrainConfig,
    Yields(own_trees=True, labels=True, confidence=True, marginals=True, prunable=True, search="MBR CKY over span marginals",
           longest=(PARSE_LIMIT, LONGER_LINES)),
    lanes="pruned",  # a pruned chart is many small steps: two batches at once pay (runtime/threads.py)
    recipe=SentenceRecipe,
    grammar=GrammarTools(_samples, _symbols),
    bf16_parts="the rank-space products (leaves and every span's children) and, training, the emission's products over "
               "the vocabulary in bfloat16",
    fp32_parts="the grammar's MLPs and softmaxes, the sums over split points, scales, loss and weights in float32")
