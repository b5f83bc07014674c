"""The TN-PCFG's cases of scripts/bench/benchmark.py (`--models pcfg`): a training step against its matrix-product
floor, side by side with the reference implementation's rank-space path, and the memory of a long sentence.

- `pcfg train {precision} batch B x N words`: one training step (inside pass, log-likelihood, backward, gradient
  clip 3, Adam) of a batch of B random sentences of N words at the paper's sizes (NT 250, T 500, rank 500,
  symbol dimension 256, vocabulary 10,000), median seconds after warm-up, and the floor: the same step's matrix
  products alone (the grammar's MLPs and the emission softmax's product, the leaves' and every width's rank-space
  products, forward and the two products of each backward), in the same precision.
- `pcfg train reference ...`: the same batch through sustcsonglin/TN-PCFG's rank-space path (`FastTNPCFG` with
  `Fastest_TDPCFG`), loaded from a checkout given as `--pcfg-reference DIR` with its Triton import removed (its
  other modules are not needed), in float32 as it runs.
- `pcfg parse one 100-word sentence`: span marginals and the tree of one 100-word sentence (peak memory).
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
import types
from pathlib import Path

VOCAB = 10000
SIZES = {"pcfg": (250, 500, 500, 256), "pcfg-tiny": (10, 20, 16, 32)}  # nonterminals, preterminals, rank, symbol dim


def pcfg_config(name: str):
    from grammar_induce.families.pcfg.settings import PCFGConfig

    nt, t, r, s = SIZES[name]
    return PCFGConfig(kind="pcfg", nonterminals=nt, preterminals=t, rank=r, symbol_dim=s)


def median_seconds(fn, repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def bench_pcfg_training(name: str, device_name: str, batch: int, words: int, precision: str, repeats: int) -> dict:
    import torch

    from grammar_induce.families.pcfg.model import TNPCFG
    from grammar_induce.families.sentences import ADAM_BETAS, sentence_step
    from grammar_induce.runtime.precision import product_dtype

    device = torch.device(device_name)
    torch.manual_seed(0)
    cfg = pcfg_config(name)
    model = TNPCFG(VOCAB, cfg).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=ADAM_BETAS)
    data = torch.randint(2, VOCAB, (batch, words), device=device)
    products = product_dtype(precision)
    seconds = median_seconds(lambda: sentence_step(model, optimizer, data, [words] * batch, 3.0, products),
                             repeats, warmup=2)
    floor = median_seconds(product_floor(cfg, batch, words, device, products), repeats, warmup=2)
    tokens = batch * words
    return {"tokens_per_s": tokens / seconds, "floor_tokens_per_s": tokens / floor, "ratio": floor / seconds,
            "seconds": seconds}


def product_floor(cfg, batch: int, words: int, device, products):
    """The matrix products one training step must do, at their shapes, each forward product followed by the two
    of its backward (the gradients of both operands)."""
    import torch

    nt, t, r, s = cfg.nonterminals, cfg.preterminals, cfg.rank, cfg.symbol_dim
    dtype = products or torch.float32
    shapes = [(t, s, s)] * 5 + [(t, s, VOCAB)] + [(1, s, s)] * 5 + [(1, s, nt)]  # the emission and root MLPs
    shapes += [(nt + t, s, s), (nt + t, s, r)] * 3  # the rule MLPs (eq. 7)
    shapes += [(r, nt, r)] * 2 + [(batch * words, t, 2 * r)]  # U^T V, U^T W; the leaves
    shapes += [(batch * (words - w + 1), r, 2 * r) for w in range(2, words)]  # every width's spans to children
    operands = [(torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype),
                 torch.randn(m, n, device=device, dtype=dtype)) for m, k, n in shapes]

    def run():
        for a, b, g in operands:
            a @ b
            g @ b.t()
            a.t() @ g
    return run


def bench_pcfg_reference(name: str, device_name: str, batch: int, words: int, reference: str, repeats: int) -> dict:
    """The reference's rank-space path on the same batch (float32, as it runs)."""
    import torch

    fast = load_reference(Path(reference))
    device = torch.device(device_name)
    nt, t, r, s = SIZES[name]
    args = types.SimpleNamespace(use_triton=False, NT=nt, T=t, s_dim=s, r_dim=r, word_emb_size=200)
    dataset = types.SimpleNamespace(device=device, word_vocab=range(VOCAB))
    torch.manual_seed(0)
    model = fast.FastTNPCFG(args, dataset).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.75, 0.999))
    data = {"word": torch.randint(2, VOCAB, (batch, words), device=device),
            "seq_len": torch.full((batch,), words, device=device)}

    def step():
        optimizer.zero_grad()
        loss = model.loss(data)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 3)
        optimizer.step()

    seconds = median_seconds(step, repeats, warmup=1)
    return {"tokens_per_s": batch * words / seconds, "seconds": seconds}


def load_reference(root: Path):
    """sustcsonglin/TN-PCFG's TN_PCFG.py and what its rank-space path imports (pcfgs/fn.py, pcfgs/pcfgs.py,
    pcfgs/tdpcfg.py without its Triton import, modules/res.py), as a package of their own in a temporary folder."""
    files = {"fn.py": "parser/pcfgs/fn.py", "pcfgs.py": "parser/pcfgs/pcfgs.py", "tdpcfg.py": "parser/pcfgs/tdpcfg.py",
             "res.py": "parser/modules/res.py", "tn_pcfg.py": "parser/model/TN_PCFG.py"}
    folder = Path(tempfile.mkdtemp()) / "tn_reference"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for name, path in files.items():
        text = (root / path).read_text()
        text = text.replace("from parser.triton.fn import _log_then_diagonal_copy_, _merge\n", "")
        for module in ("parser.pcfgs.fn", "parser.pcfgs.pcfgs", "parser.modules.res", "..pcfgs.tdpcfg"):
            text = text.replace(f"from {module} import", f"from tn_reference.{module.split('.')[-1]} import")
        (folder / name).write_text(text)
    sys.path.insert(0, str(folder.parent))
    spec = importlib.util.spec_from_file_location("tn_reference.tn_pcfg", folder / "tn_pcfg.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["tn_reference.tn_pcfg"] = module
    spec.loader.exec_module(module)
    return module


def bench_pcfg_long_sentence(name: str, device_name: str, words: int) -> dict:
    import torch

    from grammar_induce.families.pcfg.model import TNPCFG

    torch.manual_seed(0)
    model = TNPCFG(VOCAB, pcfg_config(name)).to(torch.device(device_name)).eval()
    tokens = torch.randint(2, VOCAB, (1, words + 2))
    start = time.perf_counter()
    model.read(tokens, [[f"w{k}" for k in range(words)]])
    return {"sentences_per_s": 1 / (time.perf_counter() - start)}


def pcfg_cases(name: str, case, precisions: list[str], reference: str | None, quick: bool) -> dict[str, dict]:
    """Every PCFG case, each in its own process (`case(fn, *args)`)."""
    repeats = 2 if quick else 5
    shapes = [(4, 10)] if quick else [(32, 10), (32, 20), (32, 40)]
    results = {}
    for batch, words in shapes:
        label = f"batch {batch} x {words} words"
        for precision in precisions:
            results[f"{name} train {precision} {label}"] = case("bench_pcfg_training", batch, words, precision, repeats)
        if reference:
            results[f"{name} train reference rank-space {label}"] = ref = case(
                "bench_pcfg_reference", batch, words, reference, max(2, repeats // 2))
            if ref:
                for precision in precisions:
                    ours = results[f"{name} train {precision} {label}"]
                    ours["reference speedup"] = ref["seconds"] / ours["seconds"]
    results[f"{name} parse one {20 if quick else 100}-word sentence"] = case("bench_pcfg_long_sentence",
                                                                           20 if quick else 100)
    return results
