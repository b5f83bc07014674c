"""The tables of an ensemble's members: how much each agrees with the others (`parse --agreement`, `evaluate`) and
`rank`'s standings. Plain text, from plain records; the evaluation's own table is output/evaluation.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..metrics import SpanMetric


class Standing(Protocol):
    """A member's standing among its peers (inference/ensemble.py makes them)."""

    agreement: float
    baseline: float
    lead: float
    weight: float
    peers: str  # "other families" or "other members"


def agreement_table(agreement: dict[str, SpanMetric]) -> str:
    """Each member's sentence F1 against the other members' trees, and the mean over all pairs."""
    lines = ["agreement between members (sentence F1 against the others' trees; no gold needed)"]
    lines += [f"  {name:30s} {100 * m.sentence_f1:6.1f}" for name, m in agreement.items()]
    mean = sum(m.sentence_f1 for m in agreement.values()) / len(agreement)
    lines.append(f"  {'mean pairwise F1':30s} {100 * mean:6.1f}")
    return "\n".join(lines)


def standings_table(names: Sequence[str], kinds: Sequence[str], layers: Sequence[int], own_trees: Sequence[bool],
                    standings: Sequence[Standing], decoder: str | None = None) -> str:
    """`rank`'s table: a row per model (its name, kind, the layer it parses with, shown as - for one that yields its
    own trees), the best first; then how to parse with these layers, weights and decoder whatever the text."""
    rows = [("rank", "model", "kind", "layer", "agreement", "right-branching", "lead", "weight")]
    order = sorted(range(len(names)), key=lambda k: -standings[k].lead)
    for place, k in enumerate(order, 1):
        s = standings[k]
        rows.append((str(place), names[k], kinds[k], "-" if own_trees[k] else str(layers[k]),
                     f"{100 * s.agreement:.1f}", f"{100 * s.baseline:.1f}", f"{100 * s.lead:.1f}", f"{s.weight:.3f}"))
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    legend = (f"agreement: sentence F1 of a model's trees against each of its peers' ({standings[0].peers}), averaged; "
              "right-branching: the same of right-branching trees; lead: the difference; weight: the lead, the best "
              "model's 1 (what --weights auto gives)")
    fixed = " ".join(f"--layer {layer}" for layer in layers) + " --weights " + ",".join(
        f"{s.weight:.3f}" for s in standings) + (f" --decoder {decoder}" if decoder else "")
    return "\n".join([*lines, legend, f"to parse with these, whatever the text: {fixed}"])
