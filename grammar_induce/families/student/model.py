"""The student: a span-based parser trained on an ensemble's trees (`grammar-induce distill`).

Words are read by a BiLSTM over the teachers' vocabulary; the span of words i..j-1 is the difference
of the forward states at its two fenceposts beside the difference of the backward ones (Stern et al.
2017), scored by a small MLP. Trees are a CRF over binary trees (tree_crf.inside): training raises
the log-probability of the teachers' tree, or of every tree that keeps the spans most teachers agree
on; parsing is CKY. Its checkpoint is a model like the others (model.kind = "student"); as a model kind it
yields trees of its own, not distances.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor, nn

from ... import trees
from ...structures import cky, tree_crf
from ...trees import Tree
from ..family import Family, Yields
from ..kind import ModelKind
from ..reading import Reading
from . import native_scores
from .recipe import StudentRecipe
from .settings import StudentConfig, StudentTrainConfig

SPAN_BLOCK = 1 << 22  # floats of span features at a time when parsing (16 MB)
SCORE_CELLS = 1 << 24  # floats of span scores at a time when parsing (64 MB): long lines go fewer at a time
Found = tuple[Tree, dict[tuple[int, int], float] | None, Tensor | None]  # a tree, its spans' marginals, the chart


class SpanParser(ModelKind):
    """Span scores from a BiLSTM; `emb_size`, `hidden_size` (per direction and of the MLP), `n_layers`
    (of the BiLSTM) and `dropout` of the model config."""

    def __init__(self, vocab_size: int, config: StudentConfig):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, config.emb_size)
        self.encoder = nn.LSTM(config.emb_size, config.hidden_size, num_layers=config.n_layers, bidirectional=True,
                               dropout=config.dropout if config.n_layers > 1 else 0.0)
        self.dropout = nn.Dropout(config.dropout)
        self.project = nn.Linear(2 * config.hidden_size, config.hidden_size)  # on fencepost differences
        self.score = nn.Linear(config.hidden_size, 1)
        self._converted: dict[tuple, tuple[tuple, list[Tensor]]] = {}  # see _lstm_weights

    def adopt(self, state: dict[str, Tensor], theirs: dict) -> dict[str, Tensor]:
        """A start's weights (a trained student's, or some of them: word embeddings alone), the rest as this model
        was initialised."""
        return {**self.state_dict(), **state}

    def span_scores(self, tokens: Tensor, lengths: Sequence[int], block: int = 0,
                    products: torch.dtype | None = None) -> Tensor:
        """(B, N+1, N+1) scores of every span of each sentence (the upper triangle, i < j, is read).
        `tokens`: (B, N+2) ids, `<eos>` before and after each sentence's words (padding after that is
        never read). `block` > 0: the span features of that many floats at most at a time (parsing long
        lines in bounded memory); 0: all at once, as training does. `products`: the BiLSTM's dtype when
        parsing."""
        f, b = self._fenceposts(tokens, lengths, products)
        n = tokens.shape[1] - 2
        if not block:
            return self._scores(f, b, 0, n + 1)
        if native_scores.usable(f):
            g = f - b
            return native_scores.scores(g, g + self.project.bias, self.score.weight[0], float(self.score.bias[0]))
        scores = f.new_zeros(f.shape[0], n + 1, n + 1)
        rows = max(1, block // (f.shape[0] * (n + 1) * f.shape[2]))
        for i in range(0, n + 1, rows):
            scores[:, i : i + rows, i:] = self._scores(f, b, i, min(n + 1, i + rows))
        return scores

    def _fenceposts(self, tokens: Tensor, lengths: Sequence[int],
                    products: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
        """(B, N+1, H) each: the forward and the backward states at every fencepost, projected (a span's
        features are their differences). `products`: the BiLSTM's dtype when parsing (None: float32)."""
        hidden_size = self.encoder.hidden_size
        x = self.dropout(self.embedding(tokens))
        if self.training:
            packed = nn.utils.rnn.pack_padded_sequence(x, [n + 2 for n in lengths], batch_first=True,
                                                       enforce_sorted=False)
            states, _ = self.encoder(packed)
            states, _ = nn.utils.rnn.pad_packed_sequence(states, batch_first=True, total_length=tokens.shape[1])
        else:
            states = self._states_by_direction(x, lengths, products)
        states = self.dropout(states)
        n = tokens.shape[1] - 2
        forward = states[:, : n + 1, :hidden_size]  # fencepost k: after word k (position 0: the first <eos>)
        backward = states[:, 1 : n + 2, hidden_size:]  # fencepost k: before word k+1, read from the right
        weight_f, weight_b = self.project.weight[:, :hidden_size], self.project.weight[:, hidden_size:]
        return forward @ weight_f.t(), backward @ weight_b.t()

    def _states_by_direction(self, x: Tensor, lengths: Sequence[int], products: torch.dtype | None) -> Tensor:
        """The BiLSTM's (B, T, 2H) states as packed sequences give them, each layer and direction one
        unpacked call: the backward direction reads each row's tokens reversed in place (its padding stays at
        the end, after what it reads). Unpacked rows run torch's fused CPU kernels (oneDNN: in bfloat16 with
        `products`, several times faster where the CPU has AMX); packed ones step by step in float32. The layers
        run time-major, as those kernels do (batch-first inputs and outputs would be copied at every call)."""
        rows, steps = x.shape[:2]
        ends = torch.tensor([n + 2 for n in lengths], device=x.device)
        at = torch.arange(steps, device=x.device)[:, None]
        reverse = torch.where(at < ends, ends - 1 - at, at)  # (T, B): its own inverse
        reverse = (reverse * rows + torch.arange(rows, device=x.device)).view(-1)  # as rows of (T * B, D)

        def reversed_rows(t: Tensor) -> Tensor:  # index_select: many times faster than gather here
            return t.view(steps * rows, -1).index_select(0, reverse).view_as(t)

        inputs = _contiguous(x.transpose(0, 1), products or x.dtype)  # (T, B, D)
        for layer in range(self.encoder.num_layers):
            forward = self._direction(inputs, layer, "")
            backward = self._direction(reversed_rows(inputs), layer, "_reverse")
            inputs = torch.cat([forward, reversed_rows(backward)], dim=2)
        return _contiguous(inputs.transpose(0, 1), torch.float32)

    def _direction(self, inputs: Tensor, layer: int, suffix: str) -> Tensor:
        """One layer of one direction of the encoder over (T, B, D) inputs, from a zero state."""
        weights = self._lstm_weights(layer, suffix, inputs.dtype)
        zeros = inputs.new_zeros(1, inputs.shape[1], self.encoder.hidden_size)
        # has_biases, one layer, no dropout, not training, one direction, time-major
        states, _, _ = torch.lstm(inputs, (zeros, zeros), weights, True, 1, 0.0, False, False, False)
        return states

    def _lstm_weights(self, layer: int, suffix: str, dtype: torch.dtype) -> list[Tensor]:
        """One direction's weights in `dtype`, converted once for as long as they are unchanged (else every batch of
        a parse converts them again: 5% of a bfloat16 parse)."""
        names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        weights = [getattr(self.encoder, f"{name}_l{layer}{suffix}") for name in names]
        if dtype == weights[0].dtype:
            return weights
        stamp = tuple((w.data_ptr(), w._version) for w in weights)  # a step of training changes the version
        cached = self._converted.get((layer, suffix, dtype))
        if cached is None or cached[0] != stamp:
            cached = self._converted[layer, suffix, dtype] = (stamp, [w.detach().to(dtype) for w in weights])
        return cached[1]

    def _scores(self, f: Tensor, b: Tensor, first: int, last: int) -> Tensor:
        """Scores of the spans from fenceposts first..last-1 to every fencepost from `first` on:
        [f_j - f_i ; b_i - b_j] projected is f_j - f_i + b_i - b_j = (f_j - b_j) - (f_i - b_i), for i on rows and
        j on columns: one difference of two (B, N+1, H) tensors, the bias added to the columns before."""
        g = f - b
        columns = g[:, None, first:] + self.project.bias
        return self.score(torch.relu_(columns - g[:, first:last, None])).squeeze(-1)

    def loss(self, tokens: Tensor, lengths: Sequence[int], kept: Sequence[set[tuple[int, int]]],
             marginals: Tensor | None = None, soft: float = 0.0) -> Tensor:
        """Mean negative log-probability of the trees that keep each sentence's `kept` spans (a whole
        tree's spans: that tree); with `soft` > 0, mixed with the soft-target loss of the teachers' span
        `marginals` (B, N+1, N+1) at that weight (tree_crf.TreeCRF.cross_entropy)."""
        crf = tree_crf.TreeCRF(self.span_scores(tokens, lengths), lengths)
        hard = crf.partition - crf.keeping(kept).partition if soft < 1 else 0.0
        if not soft:
            return hard.mean()
        return ((1 - soft) * hard + soft * crf.cross_entropy(marginals)).mean()

    @torch.no_grad()
    def read(self, tokens: Tensor, words: Sequence[Sequence[str]], n_layers: int | None = None,
             products: torch.dtype | None = None, confidence: bool = False, marginals: bool = False
             ) -> list[Reading]:
        """Each sentence's CKY tree (and, `confidence`, its spans' marginals under the CRF; `marginals`, every
        span's: a chart), the batch in parts small enough that its (B, N+1, N+1) span scores fit in SCORE_CELLS (the
        rows are sorted by length, the longest last)."""
        found: list[Found] = []
        for rows, part in self._parts(tokens, words):
            found += self.trees(rows, [len(w) for w in part], part, products, confidence, marginals)
        return [Reading(list(w), parsed_tree=tree, confidence=sure, marginals=chart)
                for w, (tree, sure, chart) in zip(words, found)]

    @torch.no_grad()
    def likely_spans(self, tokens: Tensor, words: Sequence[Sequence[str]], threshold: float,
                     products: torch.dtype | None = None) -> list[Tensor]:
        """ModelKind's, a batch at once: the CRF's marginals at least `threshold` or in CKY's tree (no tree built:
        a pruner's Python is a lane's, runtime/threads.py); past cky.EXACT_LIMIT words every span."""
        found: list[Tensor] = []
        for rows, part in self._parts(tokens, words):
            lengths = [len(w) for w in part]
            if max(lengths) > cky.EXACT_LIMIT:
                found += [torch.ones(n + 1, n + 1, dtype=torch.bool) for n in lengths]
                continue
            crf = tree_crf.TreeCRF(self.span_scores(rows, lengths, SPAN_BLOCK, products), lengths)
            keep = (crf.marginals >= threshold).cpu() | crf.argmax_spans
            found += [keep[b, : n + 1, : n + 1] for b, n in enumerate(lengths)]
        return found

    def _parts(self, tokens: Tensor, words: Sequence[Sequence[str]]
               ) -> Iterator[tuple[Tensor, Sequence[Sequence[str]]]]:
        """The batch (rows sorted by length, the longest last) in parts small enough that their (B, N+1, N+1) span
        scores fit in SCORE_CELLS: each part's rows, on the model's device, and words."""
        step = max(1, SCORE_CELLS // (len(words[-1]) + 1) ** 2)
        for start in range(0, len(words), step):
            part = words[start : start + step]
            yield tokens[start : start + step, : len(part[-1]) + 2].to(self.device), part

    @torch.no_grad()
    def trees(self, tokens: Tensor, lengths: Sequence[int], words: Sequence[Sequence[str]],
              products: torch.dtype | None = None, confidence: bool = False, marginals: bool = False
              ) -> list[Found]:
        """Each sentence's highest-scoring tree: CKY over every span's score, with (`confidence`) its spans'
        marginals and (`marginals`) every span's; past cky.EXACT_LIMIT words the greedy split, which scores only the
        spans it looks at (memory linear in the length; no marginals)."""
        if max(lengths) <= cky.EXACT_LIMIT:
            crf = tree_crf.TreeCRF(self.span_scores(tokens, lengths, SPAN_BLOCK, products), lengths)
            best = crf.argmax(words)
            charts = crf.marginals.cpu() if confidence or marginals else None
            return [(tree, tree_crf.span_values(charts[b], tree) if confidence else None,
                     charts[b, : n + 1, : n + 1] if marginals else None)
                    for b, (tree, n) in enumerate(zip(best, lengths))]
        return [(self.greedy_tree(tokens[b : b + 1, : n + 2], words[b], products), None, None)
                for b, n in enumerate(lengths)]

    def greedy_tree(self, tokens: Tensor, words: Sequence[str], products: torch.dtype | None = None) -> Tree:
        """cky.greedy_splits's tree (top down, each span split where its two parts score the most, leftmost
        on ties), each split's candidate parts scored at once from the fenceposts."""
        f, b = self._fenceposts(tokens, [len(words)], products)
        f, b = f[0], b[0]  # (n+1, H)

        def scores(starts: Tensor, ends: Tensor) -> Tensor:
            spans = f[ends] - f[starts] + b[starts] - b[ends]
            return self.score(torch.relu(spans + self.project.bias)).squeeze(-1)

        def best_split(i: int, j: int) -> int:
            k = torch.arange(i + 1, j)
            left = torch.where(k - i >= 2, scores(torch.full_like(k, i), k), 0.0)
            right = torch.where(j - k >= 2, scores(k, torch.full_like(k, j)), 0.0)
            return i + 1 + int((left + right).argmax())  # the first maximum: the leftmost split

        return trees.tree_of_splits(words, cky.splits_top_down(best_split, len(words)))


def _contiguous(t: Tensor, dtype: torch.dtype) -> Tensor:
    """t in `dtype`, laid out contiguously: one copy where both change (`to` alone keeps a view's strides)."""
    return t.contiguous() if t.dtype == dtype else t.to(dtype, memory_format=torch.contiguous_format)


FAMILY = Family(
    "student", "a distilled student", SpanParser, StudentConfig, StudentTrainConfig,
    Yields(own_trees=True, confidence=True, marginals=True, search="CKY"),  # it scores spans: CKY; its CRF's span marginals
    distilled_by=StudentRecipe,  # `distill` fits it, not `train`
    bf16_parts="the BiLSTM's products in bfloat16 when parsing",  # it trains in float32
    lanes="always")  # its products are small, its trees Python: two batches at once pay (runtime/threads.py)
