from __future__ import annotations

from pathlib import Path

import pytest

from grammar_induce import config as config_module
from grammar_induce.config import Config

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


@pytest.fixture(scope="session", autouse=True)
def token_cache(tmp_path_factory) -> Path:
    """The token cache of this test session (and of the processes it starts), not the user's."""
    import os

    from grammar_induce.text.corpus import CACHE_ENV

    path = tmp_path_factory.mktemp("token_cache")
    os.environ[CACHE_ENV] = str(path)
    return path


def tiny_config(tmp_path: Path | None = None, **sections) -> Config:
    """configs/tiny.toml with section overrides, e.g. train={"epochs": 1}."""
    raw = config_module.load(ROOT / "configs" / "tiny.toml")
    raw["train"]["device"] = "cpu"
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return config_module.from_dict(raw)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A trained tiny model's run directory (trained once per test session)."""
    from grammar_induce.workflows.train import train

    out = tmp_path_factory.mktemp("tiny_run")
    train(tiny_config(), out, **QUIET)
    return out


@pytest.fixture(scope="session")
def tiny_model(tiny_run):
    from grammar_induce.models import checkpoint

    return checkpoint.load(tiny_run / "best.pt")


@pytest.fixture(scope="session")
def tiny_backward_run(tmp_path_factory) -> Path:
    """A tiny model trained to read sentences right to left."""
    from grammar_induce.workflows.train import train

    out = tmp_path_factory.mktemp("tiny_backward_run")
    train(tiny_config(model={"direction": "backward"}), out, **QUIET)
    return out


@pytest.fixture(scope="session")
def tiny_backward_model(tiny_backward_run):
    from grammar_induce.models import checkpoint

    return checkpoint.load(tiny_backward_run / "best.pt")
