from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from xml.etree import ElementTree

import pytest
from click.testing import CliRunner
from hypothesis import strategies as st

import grammar_induce as gi
from grammar_induce import config as config_module
from grammar_induce.cli import main
from grammar_induce.config import RUN_KEYS, Config
from grammar_induce.families import checkpoint
from grammar_induce.families.registry import CONFIGS
from grammar_induce.text.tokenizer import Tokenizer
from grammar_induce.workflows.train import train

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"
QUIET = {"quiet": True}  # keyword arguments that silence train() (its messages say nothing by default)


def _cpu_features() -> str:
    """The vector units that decide how float32 sums round here (tests comparing floats name them)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "unknown"
    found = [name for name in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if name in flags]
    return " ".join(found) or "none of avx2, avx512f, avx512_bf16, amx_bf16"


CPU_FEATURES = _cpu_features()


def pytest_report_header(config) -> str:
    return f"cpu features: {CPU_FEATURES}"


def pytest_addoption(parser) -> None:
    parser.addoption("--audit", action="store_true",
                     help="also run the tests marked audit: the shipped models' published numbers recomputed from the "
                          "full data (minutes; .ci/run runs them after the suite)")


def pytest_collection_modifyitems(config, items) -> None:
    if config.getoption("--audit"):
        return
    skip = pytest.mark.skip(reason="an audit (the shipped models' numbers from the full data): run with --audit")
    for item in items:
        if "audit" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def token_cache(tmp_path_factory) -> Path:
    """The token cache of this test session (and of the processes it starts), not the user's."""
    import os

    from grammar_induce.text.corpus import CACHE_ENV

    path = tmp_path_factory.mktemp("token_cache")
    os.environ[CACHE_ENV] = str(path)
    return path


def tiny_config(tmp_path: Path | None = None, **sections) -> Config:
    """configs/tiny.toml with section overrides, e.g. run={"epochs": 1}; for another kind (model={"kind": "pcfg"}),
    the tiny config's keys that its family reads."""
    raw = config_module.read_toml(ROOT / "configs" / "tiny.toml")
    raw["run"]["device"] = "cpu"
    raw["model"]["kind"] = sections.get("model", {}).get("kind", "onlstm")
    raw = CONFIGS.migrated(raw)  # another family: the tiny config's keys it reads (its data, its training)
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return CONFIGS.from_dict(raw)


def by_section(settings: dict) -> dict[str, dict]:
    """Keyword settings of a test's config as its sections: the loop's keys in [run], the others in [train]."""
    return {"train": {k: v for k, v in settings.items() if k not in RUN_KEYS},
            "run": {k: v for k, v in settings.items() if k in RUN_KEYS}}


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A trained tiny model's run directory (trained once per test session)."""

    out = tmp_path_factory.mktemp("tiny_run")
    train(tiny_config(), out, **QUIET)
    return out


@pytest.fixture(scope="session")
def tiny_model(tiny_run):

    return checkpoint.load(tiny_run / "best.pt")


@pytest.fixture(scope="session")
def tiny_backward_run(tmp_path_factory) -> Path:
    """A tiny model trained to read sentences right to left."""

    out = tmp_path_factory.mktemp("tiny_backward_run")
    train(tiny_config(model={"direction": "backward"}), out, **QUIET)
    return out


@pytest.fixture(scope="session")
def tiny_backward_model(tiny_backward_run):

    return checkpoint.load(tiny_backward_run / "best.pt")


# helpers of the cases moved from the round-named files

SYNTHETIC_GOLD = ROOT / "grammar_induce" / "resources" / "synthetic" / "test.trees"


LABELLED_GOLD = "( (S (NP-SBJ (DT The) (NN dog) (-NONE- *-1)) (, ,) (VP (VBD barked) (NP (DT a) (NN lot))) (. .)) )\n"


def invoke(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


def one_line_error(result, *messages):
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    error = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(error) == 1, result.output
    for message in messages:
        assert message in error[0], result.output
    return error[0]


@pytest.fixture
def run_copy(tiny_run, tmp_path) -> Path:
    """A copy of the tiny run that a test may damage."""
    copy = tmp_path / "run"
    shutil.copytree(tiny_run, copy)
    return copy


def well_formed(xml: str) -> ElementTree.Element:
    return ElementTree.fromstring(xml)


def no_temporary_files(folder: Path) -> None:
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".") and (".tmp" in p.name or ".new" in p.name)]


def bar_titles(svg: str, layer: int) -> list[float]:
    root = well_formed(svg)
    return [float(rect.find("{*}title").text) for rect in root.iter("{http://www.w3.org/2000/svg}rect")
            if rect.get("data-layer") == str(layer)]


def run_limited(args: list, limit: int, cwd: Path, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI in a process that cannot write a file past `limit` bytes (a full disk, for it)."""
    def limit_writes():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "grammar_induce", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, preexec_fn=limit_writes, env=env, timeout=300, check=False)


def assert_one_line_error(done: subprocess.CompletedProcess, message: str) -> None:
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert message in done.stderr and done.stderr.count("\n") == 1, done.stderr


def fifo_with(path: Path, text: str, times: int = 1) -> threading.Thread:
    """A named pipe that gives `text` to the first `times` readers."""
    os.mkfifo(path)

    def feed():
        for _ in range(times):
            with open(path, "w") as f:
                f.write(text)

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return thread


TREEBANK_TOKENIZER = Tokenizer("treebank", lowercase=True, replace_digits=True)


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raising KeyboardInterrupt, as in a terminal: a process started in the background by a shell (a CI job)
    inherits SIGINT ignored, and then Python never raises it."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture(scope="module")
def ptb():
    return gi.load("ptb")


SMALL_STUDENT = {"emb_size": 16, "hidden_size": 16, "n_layers": 1, "max_length": 12, "epochs": 2}


def small_text(tmp_path, count=60):
    from .test_distillation import SYNTHETIC

    path = tmp_path / "train.txt"
    path.write_text("".join(SYNTHETIC.joinpath("train.txt").read_text().splitlines(keepends=True)[:count]))
    return path


class RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def run_training(out, extra=()):
    return subprocess.Popen([sys.executable, "-m", "grammar_induce", "train", "--config",
                             str(ROOT / "configs" / "tiny.toml"), "--out", str(out), "--quiet",
                             "--device", "cpu", "--epochs", "4", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


TREE_ALPHABET = st.sampled_from(list("()( )NPVBDTS -\n\tab.,'\"\\é苹\x00"))


def sole_line_error(result, message):
    assert result.exit_code == 1, result.output
    assert message in result.output and "Traceback" not in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


@pytest.fixture(params=[False, True], ids=["split-points-one-at-a-time", "split-points-at-once"])
def tensor_sums(request, monkeypatch):
    """Both forms of the tensor-op sums over split points run on the CPU: one at a time (the CPU's without C) and all
    of a width at once (a GPU's)."""
    from grammar_induce.structures import rank_cfg

    monkeypatch.setattr(rank_cfg, "SPLIT_POINTS_AT_ONCE_ON_CPU", request.param)
    return request.param
