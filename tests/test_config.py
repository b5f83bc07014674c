import pytest

from grammar_induce import config as C
from grammar_induce.config import ConfigError

from .conftest import ROOT


def test_shipped_configs_load():
    for name in ("ptb", "ptb-cpu", "quickstart", "tiny"):
        cfg = C.from_dict(C.load(ROOT / "configs" / f"{name}.toml"))
        assert cfg.model.n_layers == 3
    ptb = C.from_dict(C.load(ROOT / "configs" / "ptb.toml"))
    assert (ptb.model.emb_size, ptb.model.hidden_size, ptb.model.chunk_size) == (400, 1150, 10)
    assert (ptb.train.batch_size, ptb.train.bptt, ptb.train.lr, ptb.train.seed, ptb.train.epochs) == (20, 70, 30.0, 141, 1000)
    assert (ptb.model.dropout, ptb.model.dropouth, ptb.model.dropouti, ptb.model.dropoute, ptb.model.wdrop) == \
        (0.45, 0.3, 0.5, 0.1, 0.45)


def test_overrides_and_unknown_keys():
    raw = C.apply_overrides({"model": {"emb_size": 10, "hidden_size": 20}}, ["train.lr=5", "model.chunk_size=5",
                                                                              "data.tokenizer=jieba"])
    cfg = C.from_dict(raw)
    assert cfg.train.lr == 5.0 and cfg.model.chunk_size == 5 and cfg.data.tokenizer == "jieba"
    with pytest.raises(ConfigError, match="unknown key train.lrr"):
        C.from_dict({"train": {"lrr": 1}})
    with pytest.raises(ConfigError, match=r"unknown section \[optim\]"):
        C.from_dict({"optim": {}})
    with pytest.raises(ConfigError, match="expected section.key=value"):
        C.apply_overrides({}, ["lr=3"])


@pytest.mark.parametrize("raw, message", [
    ({"model": {"dropout": -0.1}}, r"model.dropout must be in \[0, 1\)"),
    ({"model": {"hidden_size": 1150, "chunk_size": 7}}, "does not divide"),
    ({"train": {"batch_size": 0}}, "train.batch_size must be positive"),
    ({"train": {"lr": "fast"}}, "train.lr must be float"),
    ({"data": {"tokenizer": "spacy"}}, "data.tokenizer must be"),
])
def test_impossible_values(raw, message):
    with pytest.raises(ConfigError, match=message):
        C.from_dict(raw)


def test_toml_round_trip():
    cfg = C.from_dict(C.load(ROOT / "configs" / "quickstart.toml"))
    import tomllib

    assert C.from_dict(tomllib.loads(C.to_toml(cfg))) == cfg


PRESETS = sorted((ROOT / "configs").glob("*.toml"))


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_every_preset_loads_and_states_only_what_differs_from_the_defaults(preset):
    import tomllib

    C.from_dict(C.load(preset), str(preset))  # validates
    defaults = C.Config().to_dict()
    stated = tomllib.loads(preset.read_text())
    for section in ("model", "train"):
        same = [key for key, value in stated.get(section, {}).items() if defaults[section][key] == value]
        assert not same, f"{preset.name} repeats defaults: {section}.{', '.join(same)}"


def test_the_paper_preset_is_the_defaults_with_its_data():
    loaded = C.from_dict(C.load(ROOT / "configs" / "ptb.toml"))
    assert loaded.model == C.Config().model and loaded.train == C.Config().train
