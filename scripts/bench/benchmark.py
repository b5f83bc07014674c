"""Training and parsing speed against the matrix-multiplication floor, in one run.

    python scripts/bench/benchmark.py [--device cpu|cuda] [--threads N] [--json FILE] [--quick] [--models ptb,tiny]
                                [--precisions fp32,bf16]

For `configs/ptb.toml`- and `configs/tiny.toml`-sized models it measures, in each precision
(fp32, and bf16 where the hardware has bfloat16 units; see grammar_induce/runtime/precision.py):
- each kind of matrix product of a training batch, alone (milliseconds);
- training tokens/s with the full recipe (dropouts, DropConnect, AR/TAR, clipping, SGD step, and again with the
  averaged SGD step the recipe switches to; fixed sequence length), the median over batches after warm-up, and the
  "floor": the time of
  only the matrix products one such batch must do (forward and backward of every input map,
  of the hidden map at every step, and of the decoder, at their real shapes; the hidden map's on
  the weight laid out once per sequence, as the recurrence runs them), in the same precision;
  and training as the paper's code trains (per-step layers through autograd, `tests/paper_onlstm.py`),
  the baseline of the speed-ups;
- parsing sentences/s of 20-word sentences, one at a time and in batches of 64 and 256, with
  the forward floor in the same precision, and one at a time with the plain per-step implementation
  (`tests/paper_onlstm.py`): as the paper's code runs it (the DropConnect weight scaled
  at every step) and with the weight scaled once per sentence;
- parsing with a two-model ensemble (one forward and one backward model, span voting) against
  one model, both through the whole `parse` workflow (tokenizing, distances, trees, rendering),
  and the same on one 800-word line (seconds);
- parsing one very long line (500, 2000 and 8000 words) through the `parse` workflow, in
  words/s: the time should grow linearly with the length;
- a distilled student of the shipped size through the `parse` workflow: beside the pair it would learn from,
  and in each precision against its floor (its matrix products alone);
- peak memory of each case (each runs in its own process; CPU: peak RSS, CUDA: peak allocated).

`--models pcfg` (or `pcfg-tiny`) runs the TN-PCFG's cases instead (scripts/bench/benchmark_pcfg.py): a training step
against its matrix-product floor and, with `--pcfg-reference DIR` (a checkout of sustcsonglin/TN-PCFG), beside
the reference implementation's rank-space path on the same batch.
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing
import statistics
import sys
import time
import warnings
from pathlib import Path
from queue import Empty

# torch warns on import when numpy is absent (also in each spawned case); nothing here needs numpy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]  # the PCFG's cases; tests/paper_onlstm.py
from benchmark_pcfg import bench_pcfg_long_sentence, bench_pcfg_reference, bench_pcfg_training, pcfg_cases

__all__ = ["bench_pcfg_long_sentence", "bench_pcfg_reference", "bench_pcfg_training"]
VOCAB = 10000
PARSE_WORDS = 20
# The plain per-step parser, one sentence at a time: as the paper's code (DropConnect weight
# scaled at every step), and tidied (scaled once per sentence).
REFERENCE_VARIANTS = {"per-step paper": True, "per-step scaled once": False}
LONG_LINES = (500, 2000, 8000)  # words in one line: parse time should grow linearly
ENSEMBLE_LINE = 800  # words in the one line span voting combines (exact CKY; under 5 s is the target)


def model_config(name: str):
    from grammar_induce import config
    from grammar_induce.families.registry import CONFIGS

    return CONFIGS.from_dict(config.read_toml(ROOT / "configs" / f"{name}.toml"))


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, repeats: int, warmup: int) -> float:
    """Median seconds of fn() over `repeats` calls after `warmup` calls."""
    return timed_pair(fn, None, device, repeats, warmup)[0]


def timed_pair(fn, floor_fn, device, repeats: int, warmup: int) -> tuple[float, float]:
    """Median seconds of fn() and of floor_fn(), alternated call by call so both see the same
    machine (these machines are noisy; a ratio of interleaved medians is what is stable)."""
    for _ in range(warmup):
        fn()
        if floor_fn:
            floor_fn()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for f, bucket in ((fn, times[0]), (floor_fn, times[1])):
            if f is None:
                continue
            sync(device)
            start = time.perf_counter()
            f()
            sync(device)
            bucket.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1]) if floor_fn else 0.0


def layer_shapes(cfg):
    """(input size, hidden size, gate size) of each layer."""
    sizes = cfg.model.layer_sizes
    return [(sizes[k], sizes[k + 1], 4 * sizes[k + 1] + 2 * (sizes[k + 1] // cfg.model.chunk_size))
            for k in range(cfg.model.n_layers)]


def torch_dtype(precision: str):
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]


def matmul_floor(cfg, steps: int, batch: int, device, backward: bool, decoder: bool, n_layers: int | None = None,
                 precision: str = "fp32"):
    """A function doing only the matrix products of one batch (through the lowest `n_layers`), at their real
    shapes, in `precision`, the per-step ones as the recurrence runs them (families/onlstm/products.py). Each operand is
    given in the layout the step multiplies it in, made beforehand and not timed, but for the per-step products'
    weights: their packing, and the backward's transposed copy it packs from, are timed, as the recurrence makes them
    once a batch. The step's other layout copies (`left_operand`'s of the gate gradients for the weights' gradients;
    on AMX, `linear_operand`'s and `transposed_left_product`'s) are not: they count against the step."""
    import torch

    from grammar_induce.families.onlstm.products import RepeatedProduct, copies_linear_weight, swaps_transposed_left

    def linear_floor(x, weight):  # x @ weight.t(), on weight.t() laid out contiguous where the step copies it so
        by_inputs = weight.t().contiguous() if copies_linear_weight(x, weight) else weight.t()
        return lambda: x @ by_inputs

    def step_by_step(weight, x, transposed=False):  # on the weight laid out once per sequence, as the recurrence
        product = RepeatedProduct(weight, batch, steps, transposed)
        uses = steps - 1 if transposed else steps  # the backward makes none for h0 (detached between batches)
        return [product(x) for _ in range(uses)]

    def r(*shape):
        return torch.randn(*shape, device=device, dtype=torch_dtype(precision))

    work = []
    for inp, hid, gates in layer_shapes(cfg)[:n_layers]:
        x, w_ih, w_hh, h = r(steps * batch, inp), r(gates, inp), r(gates, hid), r(batch, hid)
        dg, dg_step = r(steps * batch, gates), r(batch, gates)
        work.append(linear_floor(x, w_ih))  # input map, all steps at once
        work.append(lambda h=h, w=w_hh: step_by_step(w, h))  # hidden map, step by step
        if backward:
            # the weights' gradients take the gate gradients laid out gates by tokens, the layout no product is
            # slower in (oneDNN's bfloat16 on AMX or AVX-512 BF16 runs a transposed left operand slowly: the step
            # copies them so there, families/onlstm/products.py's `left_operand`)
            dg_by_gates = r(gates, steps * batch)
            work.append(lambda dg=dg, w=w_ih: dg @ w)  # d input
            work.append(lambda dg=dg_by_gates, x=x: dg @ x)  # d input map
            work.append(lambda d=dg_step, w=w_hh: step_by_step(w, d, transposed=True))  # d hidden, step by step
            hs = r(steps * batch, hid)
            work.append(lambda dg=dg_by_gates, hs=hs: dg @ hs)  # d hidden map
    if decoder:
        emb = cfg.model.emb_size
        top, w_dec, d_logits = r(steps * batch, emb), r(VOCAB, emb), r(steps * batch, VOCAB)
        work.append(linear_floor(top, w_dec))
        if backward:
            work.append(lambda: d_logits @ w_dec)
            if swaps_transposed_left(d_logits, top):  # the weight's gradient as the loss multiplies it
                top_by_features = r(emb, steps * batch)
                work.append(lambda: top_by_features @ d_logits)
            else:
                work.append(lambda: d_logits.t() @ top)
    return lambda: [w() for w in work]


def bench_training(name: str, device_name: str, batches: int, precision: str, phase: str = "sgd") -> dict:
    """Tokens a second of training steps in `phase` (the recipe's SGD, or the averaged SGD it switches to once
    validation stops improving), against the floor."""
    import dataclasses

    import torch

    from grammar_induce.families.onlstm.model import ONLSTMLanguageModel
    from grammar_induce.families.onlstm.recipe import make_optimizer, train_step
    from grammar_induce.runtime import memory

    device = torch.device(device_name)
    if device.type == "cpu":  # as training does (training/loop.py)
        memory.keep_freed_memory()
    cfg = model_config(name)
    cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, precision=precision))
    steps, batch = cfg.train.bptt, cfg.train.batch_size
    torch.manual_seed(0)
    model = ONLSTMLanguageModel(VOCAB, cfg.model).to(device)
    optimizer = make_optimizer(model, cfg, phase)
    data = torch.randint(0, VOCAB, (steps + 1, batch), device=device)
    state = {"hidden": model.init_hidden(batch)}

    def one_batch():
        _, state["hidden"] = train_step(model, optimizer, data[:-1], data[1:], state["hidden"], cfg, steps)

    floor_fn = matmul_floor(cfg, steps, batch, device, backward=True, decoder=True, precision=precision)
    seconds, floor = timed_pair(one_batch, floor_fn, device, repeats=batches, warmup=3)
    tokens = steps * batch
    return {"tokens_per_s": tokens / seconds, "floor_tokens_per_s": tokens / floor, "ratio": floor / seconds}


def bench_products(name: str, device_name: str, precisions: list[str]) -> dict:
    """Milliseconds of each kind of matrix product of a training batch, alone, in each precision."""
    import torch

    device = torch.device(device_name)
    cfg = model_config(name)
    steps, batch = cfg.train.bptt, cfg.train.batch_size
    (inp, hid, gates), (_, last_hid, last_gates) = layer_shapes(cfg)[1], layer_shapes(cfg)[-1]
    shapes = {"per-step hidden map": (batch, hid, gates), "all-steps input map": (steps * batch, inp, gates),
              "decoder": (steps * batch, cfg.model.emb_size, VOCAB), "last layer's hidden map": (batch, last_hid, last_gates)}
    result = {}
    for label, (m, k, n) in shapes.items():
        for precision in precisions:
            a, b = (torch.randn(*shape, device=device, dtype=torch_dtype(precision)) for shape in ((m, k), (k, n)))
            result[f"{label} {m}x{k} by {k}x{n} {precision}"] = 1e3 * timed(lambda a=a, b=b: a @ b, device, 20, 3)
    return result


def bench_reference_training(name: str, device_name: str, batches: int) -> dict:
    """Training as the paper's code trains: per-step layers through autograd, then clipping and an SGD step."""
    import torch

    from grammar_induce.families.onlstm.model import ONLSTMLanguageModel
    from grammar_induce.families.onlstm.recipe import make_optimizer
    from tests.paper_onlstm import reference_training_loss

    device = torch.device(device_name)
    cfg = model_config(name)
    steps, batch = cfg.train.bptt, cfg.train.batch_size
    torch.manual_seed(0)
    model = ONLSTMLanguageModel(VOCAB, cfg.model).to(device).train()
    optimizer = make_optimizer(model, cfg, "sgd")
    data = torch.randint(0, VOCAB, (steps + 1, batch), device=device)

    def one_batch():
        optimizer.zero_grad(set_to_none=True)
        reference_training_loss(model, data[:-1], data[1:], cfg.train.alpha, cfg.train.beta).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.clip)
        optimizer.step()

    return {"tokens_per_s": steps * batch / timed(one_batch, device, repeats=batches, warmup=1)}


def parse_sentences(count: int) -> list[list[str]]:
    import random

    rng = random.Random(0)
    return [[f"w{rng.randrange(VOCAB - 2)}" for _ in range(PARSE_WORDS)] for _ in range(count)]


def loaded_model(name: str, device, direction: str = "forward", seed: int = 0):
    import dataclasses

    import torch

    from grammar_induce.families.checkpoint import LoadedModel
    from grammar_induce.families.registry import family_of
    from grammar_induce.text.tokenizer import Tokenizer, Vocab

    cfg = model_config(name)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, direction=direction))
    torch.manual_seed(seed)
    vocab = Vocab(["<unk>", "<eos>"] + [f"w{k}" for k in range(VOCAB - 2)])
    return LoadedModel(family_of(cfg.model.kind).build(VOCAB, cfg.model).to(device).eval(), vocab, Tokenizer(), cfg)


def bench_parsing(name: str, device_name: str, batch_size: int, count: int, n_layers: int | None = None,
                  precision: str = "fp32") -> dict:
    import torch

    from grammar_induce.inference.members import read_sentences

    device = torch.device(device_name)
    loaded = loaded_model(name, device)
    sentences = parse_sentences(count)
    batches = -(-count // batch_size)
    floor_batch = matmul_floor(loaded.config, PARSE_WORDS + 2, min(batch_size, count), device, backward=False,
                               decoder=False, n_layers=n_layers, precision=precision)

    def floor_fn():
        for _ in range(batches):
            floor_batch()

    with torch.no_grad():
        products = torch_dtype(precision) if precision != "fp32" else None
        seconds, floor = timed_pair(lambda: read_sentences(loaded, sentences, batch_size, n_layers=n_layers,
                                                        products=products), floor_fn, device, repeats=5, warmup=1)
    return {"sentences_per_s": count / seconds, "floor_sentences_per_s": count / floor, "ratio": floor / seconds}


def bench_reference_parsing(name: str, device_name: str, count: int, scale_every_step: bool) -> dict:
    """One sentence at a time through the plain per-step implementation."""
    import torch

    from grammar_induce.trees import tree_from_distances
    from tests.paper_onlstm import reference_distances

    device = torch.device(device_name)
    loaded = loaded_model(name, device)
    sentences = parse_sentences(count)

    def parse_all():
        for words in sentences:
            ids = [1] + loaded.vocab.encode(words) + [1]
            d = reference_distances(loaded.model, torch.tensor(ids, device=device)[:, None], scale_every_step)
            tree_from_distances(d.forget[1, 1:-1, 0].tolist(), words)

    return {"sentences_per_s": count / timed(parse_all, device, repeats=1, warmup=0)}


def parse(models: list, lines: list[str], options):
    """The parse path as `parse` runs it: the members checked (inference/members.py), then the lines parsed."""
    from grammar_induce.inference.members import Members
    from grammar_induce.inference.parsing import parse as parse_members

    return parse_members(Members.of(models, options), lines)


def bench_ensemble(name: str, device_name: str, count: int) -> dict:
    """The parse workflow with a forward and a backward model (span voting) against the forward one alone."""
    import torch

    from grammar_induce.inference.ensemble import ParseOptions

    device = torch.device(device_name)
    forward, backward = loaded_model(name, device), loaded_model(name, device, "backward", seed=1)
    lines = [" ".join(words) for words in parse_sentences(count)]
    options = ParseOptions(batch_size=64)
    seconds, alone = timed_pair(lambda: list(parse([forward, backward], lines, options)[0]),
                                lambda: list(parse([forward], lines, options)[0]), device, repeats=5, warmup=1)
    return {"sentences_per_s": count / seconds, "one_model_sentences_per_s": count / alone, "ratio": alone / seconds}


def bench_long_line(name: str, device_name: str, words: int) -> dict:
    """One line of `words` words through the parse workflow: words per second."""
    import torch

    from grammar_induce.inference.ensemble import ParseOptions

    device = torch.device(device_name)
    loaded = loaded_model(name, device)
    line = " ".join(parse_sentences(-(-words // PARSE_WORDS))[0] * (-(-words // PARSE_WORDS)))
    line = " ".join(line.split()[:words])
    seconds = timed(lambda: list(parse([loaded], [line], ParseOptions())[0]), device, repeats=1, warmup=0)
    return {"tokens_per_s": words / seconds}


def bench_ensemble_long_line(name: str, device_name: str, words: int) -> dict:
    """One line of `words` words through the parse workflow with a forward and a backward model (span
    voting over the whole line): seconds, beside the forward model alone."""
    import torch

    from grammar_induce.inference.ensemble import ParseOptions

    device = torch.device(device_name)
    forward, backward = loaded_model(name, device), loaded_model(name, device, "backward", seed=1)
    line = " ".join((parse_sentences(-(-words // PARSE_WORDS))[0] * (-(-words // PARSE_WORDS)))[:words])
    seconds, alone = timed_pair(lambda: list(parse([forward, backward], [line], ParseOptions())[0]),
                                lambda: list(parse([forward], [line], ParseOptions())[0]), device, repeats=1, warmup=0)
    return {"seconds": seconds, "tokens_per_s": words / seconds, "one_model_seconds": alone}


def random_student(forward, emb_size: int, hidden_size: int, n_layers: int):
    """A distilled student of these sizes with random weights (seed 0), over `forward`'s vocabulary and tokenizer."""
    import dataclasses

    import torch

    from grammar_induce.families.checkpoint import LoadedModel
    from grammar_induce.families.student.model import FAMILY as STUDENT
    from grammar_induce.families.student.model import SpanParser
    from grammar_induce.families.student.settings import StudentConfig

    config = StudentConfig(kind="student", emb_size=emb_size, hidden_size=hidden_size, n_layers=n_layers)
    torch.manual_seed(0)
    return LoadedModel(SpanParser(VOCAB, config).to(forward.model.device).eval(), forward.vocab, forward.tokenizer,
                       dataclasses.replace(forward.config, model=config, train=STUDENT.train_config()))


def bench_student(name: str, device_name: str, count: int, words: int) -> dict:
    """A distilled student of the default size (random weights) through the parse workflow, beside the pair of
    language models it would learn from (span voting), at batch 64; and one line of `words` words."""
    import torch

    from grammar_induce.inference.ensemble import ParseOptions
    from grammar_induce.workflows.distillation import DistillSettings

    device = torch.device(device_name)
    forward, backward = loaded_model(name, device), loaded_model(name, device, "backward", seed=1)
    size = DistillSettings()
    student = random_student(forward, size.emb_size, size.hidden_size, size.n_layers)
    lines = [" ".join(sentence) for sentence in parse_sentences(count)]
    options = ParseOptions(batch_size=64)
    seconds, pair = timed_pair(lambda: list(parse([student], lines, options)[0]),
                               lambda: list(parse([forward, backward], lines, options)[0]), device, repeats=3, warmup=1)
    line = " ".join((parse_sentences(-(-words // PARSE_WORDS))[0] * (-(-words // PARSE_WORDS)))[:words])
    long = timed(lambda: list(parse([student], [line], options)[0]), device, repeats=1, warmup=0)
    return {"sentences_per_s": count / seconds, "pair_sentences_per_s": count / pair, "ratio": pair / seconds,
            f"one_{words}_word_line_seconds": long}


def bench_student_floor(name: str, device_name: str, count: int, precision: str) -> dict:
    """The shipped students' size (embedding 100, BiLSTM 2 x 200 a direction; random weights) parsing `count`
    sentences of PARSE_WORDS words through the parse workflow in `precision`, against the floor: its matrix
    products alone at their shapes (each layer and direction's input map for all steps and hidden map step by
    step, in bfloat16 under bf16; the fencepost projections and the span scores' last product in float32)."""
    import torch

    from grammar_induce.inference.ensemble import ParseOptions

    device = torch.device(device_name)
    emb, hidden, layers, batch, steps = 100, 200, 2, 64, PARSE_WORDS + 2
    student = random_student(loaded_model(name, device), emb, hidden, layers)
    lines = [" ".join(sentence) for sentence in parse_sentences(count)]
    options = ParseOptions(batch_size=batch, precision=precision)

    products = torch_dtype(precision)

    def r(*shape, dtype=products):
        return torch.randn(*shape, device=device, dtype=dtype)

    work = []
    for inp in (emb, 2 * hidden)[:layers]:
        for _ in range(2):  # directions
            x, w_ih, w_hh, h = r(batch * steps, inp), r(4 * hidden, inp), r(4 * hidden, hidden), r(batch, hidden)
            work += [lambda x=x, w=w_ih: x @ w.t(), lambda h=h, w=w_hh: [h @ w.t() for _ in range(steps)]]
    fence, project = r(batch * (steps - 1), hidden, dtype=torch.float32), r(hidden, hidden, dtype=torch.float32)
    spans, score = r(batch * (steps - 1) ** 2, hidden, dtype=torch.float32), r(hidden, 1, dtype=torch.float32)
    work += [lambda: [fence @ project for _ in range(2)], lambda: spans @ score]
    batches = -(-count // batch)

    def floor_fn():
        for _ in range(batches):
            for w in work:
                w()

    seconds, floor = timed_pair(lambda: list(parse([student], lines, options)[0]), floor_fn, device, repeats=3,
                                warmup=1)
    return {"sentences_per_s": count / seconds, "floor_sentences_per_s": count / floor, "ratio": floor / seconds}


# huge pages, as `train` sets them
TRAINED_AS_THE_CLI_TRAINS = {"bench_training", "bench_pcfg_training", "bench_structformer_training"}


def run_case(queue, threads: int, device: str, fn: str, args: tuple) -> None:
    """Child process: run one case, report its figures and peak memory. Our training cases run with torch's large
    tensors on transparent huge pages, as `train` sets them (workflows/train.py; torch reads the setting at its first
    allocation, so here, before torch is imported)."""
    import resource

    from grammar_induce.runtime import memory

    if fn.rpartition(":")[2] in TRAINED_AS_THE_CLI_TRAINS:
        memory.ask_for_huge_pages()
    import torch

    import grammar_induce  # noqa: F401  (sets the allocator defaults the CLI runs with, before any tensor exists)

    torch.set_num_threads(threads)
    module, _, name = fn.rpartition(":")  # "script:function": a function of another script beside this one
    result = (getattr(importlib.import_module(module), name) if module else globals()[fn])(*args)
    if device.startswith("cuda"):
        result["peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    else:
        result["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put(result)


def in_process(threads: int, device: str, fn: str, *args) -> dict:
    """One case's figures, run in a process of its own; a case whose process ends without them (an exception, whose
    traceback it printed, or a kill) stops the benchmark naming the case, where it used to wait for them forever."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=run_case, args=(queue, threads, device, fn, args))
    child.start()
    while True:
        try:
            result = queue.get(timeout=1.0 if child.is_alive() else 5.0)  # a result sent just before it ended: 5 s
            break
        except Empty:
            if not child.is_alive():
                raise SystemExit(f"benchmark case {fn}: its process ended with exit code {child.exitcode} "
                                 "and no figures") from None
    child.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads [default: 2]")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="fewer batches and sentences (a smoke run)")
    parser.add_argument("--models", default="ptb,tiny", help="model sizes, from configs/ [default: ptb,tiny]")
    parser.add_argument("--only", default=None, help="run only the cases whose function names contain one of "
                        "these comma-separated parts (e.g. ensemble) [default: all]")
    parser.add_argument("--pcfg-reference", default=None, metavar="DIR",
                        help="a checkout of sustcsonglin/TN-PCFG, to run beside the pcfg cases")
    parser.add_argument("--precisions", default=None,
                        help="comma-separated; fp32, the baseline, always runs [default: bf16 too where the hardware "
                        "has bfloat16 units]")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    requested = args.precisions.split(",") if args.precisions else default_precisions(args.device)
    precisions = ["fp32"] + [p for p in requested if p != "fp32"]
    batches, sentences, reference_sentences = (3, 64, 8) if args.quick else (20, 512, 48)
    results: dict[str, dict] = {}
    for name in args.models.split(","):
        if name.startswith("pcfg"):
            def case(fn: str, *case_args, name=name) -> dict:
                return in_process(args.threads, args.device, fn, name, args.device, *case_args)
            results.update(pcfg_cases(name, case, precisions, args.pcfg_reference, args.quick))
        else:
            results.update(model_cases(name, args, precisions, batches, sentences, reference_sentences))
    steps = time_steps(args.device)
    print_products(results)
    print_table({case: r for case, r in results.items() if not case.endswith(" products")}, args, steps)
    print_speedups(results, [name for name in args.models.split(",") if not name.startswith("pcfg")], precisions)
    if args.json:
        args.json.write_text(json.dumps({"device": args.device, "threads": args.threads, "time_steps": steps,
                                         "results": results}, indent=2))


def default_precisions(device: str) -> list[str]:
    import torch

    from grammar_induce.runtime.precision import bf16_hardware

    return ["fp32", "bf16"] if bf16_hardware(torch.device(device)) else ["fp32"]


def model_cases(name: str, args, precisions: list[str], batches: int, sentences: int,
                reference_sentences: int) -> dict[str, dict]:
    """Every case of one model size, each in its own process."""
    def case(fn: str, *case_args) -> dict:
        if args.only and not any(part in fn for part in args.only.split(",")):
            return {}
        return in_process(args.threads, args.device, fn, name, args.device, *case_args)

    results = {f"{name} products": case("bench_products", precisions)}
    for precision in precisions:
        results[f"{name} train {precision}"] = case("bench_training", batches, precision)
        results[f"{name} train {precision}, averaged SGD"] = case("bench_training", batches, precision, "asgd")
    results[f"{name} train per-step as the paper's code"] = case("bench_reference_training", max(2, batches // 4))
    for precision in precisions:
        for batch_size in (1, 64, 256):
            count = sentences if batch_size > 1 else sentences // 4
            results[f"{name} parse batch {batch_size} {precision}"] = case("bench_parsing", batch_size, count, None,
                                                                           precision)
        results[f"{name} parse batch 256, layers 1-2 {precision}"] = case(  # what `parse` runs for the middle layer
            "bench_parsing", 256, sentences, 2, precision)
    batched = results[f"{name} parse batch 256 fp32"].get("sentences_per_s")
    for variant, every_step in REFERENCE_VARIANTS.items():
        results[f"{name} parse {variant}"] = reference = case("bench_reference_parsing", reference_sentences, every_step)
        if reference and batched:
            reference["batch 256 speedup"] = batched / reference["sentences_per_s"]
    results[f"{name} parse 2-model ensemble"] = case("bench_ensemble", sentences)
    results[f"{name} parse 2-model ensemble, one {ENSEMBLE_LINE}-word line"] = case("bench_ensemble_long_line",
                                                                                ENSEMBLE_LINE)
    for words in LONG_LINES[: 1 if args.quick else None]:
        results[f"{name} parse one {words}-word line"] = case("bench_long_line", words)
    results[f"{name} parse student vs the pair"] = case("bench_student", sentences, ENSEMBLE_LINE)
    for precision in precisions:
        results[f"{name} parse student {precision}"] = case("bench_student_floor", sentences, precision)
    return results


def print_products(results: dict) -> None:
    for case, times in results.items():
        if case.endswith(" products"):
            print(f"{case} (ms, alone):")
            for product, ms in times.items():
                if product != "peak_mb":
                    print(f"  {product:60s} {ms:8.2f}")


def print_speedups(results: dict, names: list[str], precisions: list[str]) -> None:
    """Each precision's training and batched parsing rates over float32's and the paper-style code's."""
    for name in names:
        if not results[f"{name} train per-step as the paper's code"]:  # not run (--only)
            continue
        paper = results[f"{name} train per-step as the paper's code"]["tokens_per_s"]
        for precision in precisions:
            train = results[f"{name} train {precision}"]["tokens_per_s"]
            fp32 = results[f"{name} train fp32"]["tokens_per_s"]
            line = f"{name} {precision}: training {train / fp32:.2f}x fp32 and {train / paper:.2f}x the paper-style per-step code"
            parse, parse_fp32 = (results[f"{name} parse batch 256, layers 1-2 {p}"] for p in (precision, "fp32"))
            if parse and parse_fp32:  # not run with --only
                line += f"; parsing (batches of 256, layers 1-2) {parse['sentences_per_s'] / parse_fp32['sentences_per_s']:.2f}x fp32"
            print(line)


def time_steps(device: str) -> str:
    """How the layers' time steps ran: in C (CPU, see grammar_induce/families/onlstm/native.py) or as tensor ops."""
    import torch

    from grammar_induce.families.onlstm import native

    return "C" if native.usable(torch.empty(0, device=device)) else "tensor ops"


def print_table(results: dict, args, steps: str) -> None:
    print(f"device {args.device}, {args.threads} threads, time steps in {steps}")
    print(f"{'case':44s} {'rate':>12s} {'floor':>12s} {'ratio':>6s} {'peak MB':>8s}"
          "   (ensemble: 'floor' is one model's rate in the same run)")
    for case, r in results.items():
        if not r:
            continue
        unit = "tok/s" if "tokens_per_s" in r else "sent/s"
        rate = r.get("tokens_per_s", r.get("sentences_per_s"))
        floor = r.get("floor_tokens_per_s", r.get("floor_sentences_per_s", r.get("one_model_sentences_per_s")))
        floor_text = f"{floor:9.0f}" if floor else ""
        ratio_text = f"{r['ratio']:6.2f}" if "ratio" in r else ""
        speedup = f"  batched 256 is {r['batch 256 speedup']:.1f}x this" if "batch 256 speedup" in r else ""
        if "reference speedup" in r:
            speedup = f"  {r['seconds']:.3f} s a step, {r['reference speedup']:.2f}x the reference's speed"
        if "one_model_seconds" in r:
            speedup = f"  {r['seconds']:.2f} s, one model {r['one_model_seconds']:.2f} s"
        print(f"{case:44s} {rate:9.1f} {unit:>2s} {floor_text:>12s} {ratio_text:>6s} {r['peak_mb']:8.0f}{speedup}")


if __name__ == "__main__":
    main()
