"""`train`: a config's family trained on its text files in a run directory, started in one place (training/run.py:
the folder and its lock, last.pt read once, what a resume may change, the precision decided once), through the one
loop (training/loop.py) with the family's recipe (`Family.recipe`), a focused grammar with its teachers' votes
(families/focus.py); a trained model's perplexity on a file, as its recipe validates.
"""

from __future__ import annotations

import dataclasses
import gc
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import Config
from ..families import checkpoint, focus, registry
from ..families.recipe import exp_loss
from ..files import read_lines, write_text
from ..inference.teachers import TreeMaker, trees_file
from ..messages import Messages
from ..output import draw
from ..runtime import memory, rundir
from ..text import corpus
from ..text.tokenizer import Vocab
from ..training import run as training_run
from ..training.loop import Result, fit


def perplexity(loaded: checkpoint.LoadedModel, path: str, part: str = "valid") -> float:
    """A trained model's perplexity on a text file read as its training read text, measured as its recipe measures
    its held-out `part`, valid or test (the paper's for a language model: the file as one stream in rows, bptt-long
    windows, the state carried; a model of whole sentences: per word and sentence end)."""
    data = loaded.config.data
    entry = corpus.encoded_entry(path, corpus.training_reader(data), loaded.vocab, corpus.cache_root(data.cache_dir), 1,
                                 loaded.config.model.reading_order == "backward")
    return exp_loss(registry.recipe_of(loaded.family).held_out_loss(loaded.model, entry.ids, loaded.config, part))


TEACHERS = "teachers.json"  # in a focused run's folder: what each teacher was when it started (focus.identities)


def train(config: Config, out_dir: Path, *, resume: bool = False, force: bool = False, quiet: bool = False,
          messages: Messages | None = None, teachers: Mapping[str, TreeMaker] | None = None,
          last: dict[str, Any] | None = None) -> Result:
    """Train a model of the config's family into `out_dir` (config.toml, metrics.jsonl, best.pt, last.pt).

    Every input is checked before the run directory is touched; see `rundir` for its lock. `messages`:
    where the log lines and notes go (by default nowhere; the notes are kept). `teachers`: the focusing teachers of
    `train.focus` that are models, by the name the config gives them (the others are files of trees). `last`: the
    run's last.pt where the caller read it for --resume already (`training.run.read_last`), so it is read once.
    """
    messages = messages or Messages()
    memory.ask_for_huge_pages()  # before any tensor (faulting a batch in 4 KiB pages costs about 5% of a CPU step)
    run = training_run.start(config, out_dir, resume=resume, force=force, messages=messages, last=last)
    config, recipe, world = run.config, run.recipe, run.world
    text = recipe.read_text(config, world, run.vocab)
    if run.init is not None:
        messages.note(init_coverage(config, text.vocab))
    teachers = teachers or {}
    pinned = focus.identities(config, {name: maker.identity for name, maker in teachers.items()}) \
        if getattr(config.train, "focus", ()) else {}
    kept_pins = run.last is not None and (out_dir / TEACHERS).exists()
    if kept_pins:  # before the votes: a changed teacher's trees are never made
        focus.check_unchanged(json.loads((out_dir / TEACHERS).read_text()), pinned, out_dir / TEACHERS)
    if pinned:  # a family that trains on sentences, focused: the model teachers' trees made first, as files
        lines = corpus.training_lines(config.data)  # read once for all
        files = {name: Path(name) for name in config.train.focus}
        files |= {name: trees_file(name, maker, config, lines, messages) for name, maker in teachers.items()}
        families = {name: maker.family for name, maker in teachers.items()}
        text = dataclasses.replace(text, focus=focus.teachers_votes(config, lines, len(text.train), files, families))
    run = training_run.decide_precision(run, len(text.vocab))
    with rundir.RunDirectory(out_dir, resume, force, main=world.is_main):
        if pinned and world.is_main and not kept_pins:
            write_text(out_dir / TEACHERS, json.dumps(pinned, indent=1) + "\n")
        world.barrier()
        result = fit(run, lambda cfg, model, phase: recipe(cfg, model, text, run.device, world, phase), len(text.vocab),
                     quiet=quiet, messages=messages,
                     after_epoch=[("curves.svg", draw.write_run_curves)])
        gc.collect()  # now: a DDP wrapper can sit in reference cycles, and freed at exit it can abort the process
        world.close()
    return result


def init_coverage(config: Config, vocab: Vocab) -> str:
    """How much of the training text the vocabulary of `train.init` (which the run adopts) covers: a vocabulary of
    another text leaves most words `<unk>`, and the run learns little."""
    reader, known, total = corpus.training_reader(config.data), 0, 0
    for _, line in read_lines(config.data.train):
        words = reader(line)
        total += len(words)
        known += sum(word in vocab.index for word in words)
    share = known / total if total else 0.0
    text = (f"train.init {config.train.init}: its vocabulary ({len(vocab):,} words) covers {100 * share:.1f}% of the "
            f"training text's {total:,} words (the run reads the text with it)")
    return text + ("; the rest are <unk>: a model of another text's words learns little here" if share < 0.9 else "")
