"""Batches read two at a time on a CPU (runtime/threads.py): in order, on two threads with half of torch's threads
each, the longest batches first, the same trees as one at a time; only by the kinds that read so."""

import threading
import time

import pytest
import torch

from grammar_induce.families import checkpoint, pretrained
from grammar_induce.inference.members import parse_probe, read_sentences
from grammar_induce.inference.pruning import Pruning
from grammar_induce.runtime.threads import map_in_threads

CPU = torch.device("cpu")


@pytest.fixture
def two_torch_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_items_come_back_in_order_from_two_threads_with_one_torch_thread_each(two_torch_threads):
    seen = []

    def square(x):
        seen.append((threading.current_thread().name, torch.get_num_threads(), torch.is_grad_enabled()))
        time.sleep(0.01)  # both threads busy at once
        return x * x

    assert list(map_in_threads(square, list(range(10)), CPU)) == [x * x for x in range(10)]
    assert len({name for name, _, _ in seen}) == 2 and all(name.startswith("grammar-induce-read") for name, _, _ in seen)
    assert {(threads, grad) for _, threads, grad in seen} == {(1, False)}
    assert torch.get_num_threads() == 2  # the caller's again


def test_an_error_reaches_the_caller_and_its_torch_threads_come_back(two_torch_threads):
    def fails_on_three(x):
        if x == 3:
            raise ValueError("item 3")
        return x

    with pytest.raises(ValueError, match="item 3"):
        list(map_in_threads(fails_on_three, list(range(6)), CPU))
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("threads, device, items", [(1, CPU, [1, 2, 3]), (2, torch.device("meta"), [1, 2, 3]),
                                                    (2, CPU, [1])])
def test_one_torch_thread_another_device_or_one_item_run_in_the_calling_thread(threads, device, items):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        names = list(map_in_threads(lambda _: threading.current_thread().name, items, device))
    finally:
        torch.set_num_threads(before)
    assert names == [threading.current_thread().name] * len(items)


@pytest.mark.parametrize("name, pruned", [("en", False), ("ptb-pcfg", True)])
def test_trees_in_two_threads_are_those_read_one_batch_at_a_time(name, pruned, two_torch_threads, monkeypatch):
    """A student and a PCFG whose chart the student prunes (as shipped) read a batch in each of two threads, the
    longest batches first, each with one torch thread: the same arithmetic as reading alone on one."""
    loaded = checkpoint.load(pretrained.catalogue()[name].paths[0])
    assert loaded.family.lanes == ("pruned" if name == "ptb-pcfg" else "always")
    pruning = Pruning(checkpoint.load(pretrained.catalogue()["en"].paths[0])) if pruned else None
    words = "the old man saw a dog near the river and the cat sat on the mat".split()
    sentences = [words[k % 5 : k % 5 + 3 + k % 11] for k in range(60)]
    torch.set_num_threads(1)
    alone = read_sentences(loaded, sentences, batch_size=8, pruning=pruning)
    torch.set_num_threads(2)
    threads_used, lengths_read = record_threads(loaded, monkeypatch)
    together = read_sentences(loaded, sentences, batch_size=8, pruning=pruning)
    assert all(name.startswith("grammar-induce-read") for name in threads_used)  # the lanes' threads
    assert [r.parsed_tree for r in together] == [r.parsed_tree for r in alone]
    assert max(lengths_read[:2]) == max(map(len, sentences))  # the longest batch among the first two begun


def test_an_onlstm_reads_one_batch_at_a_time_with_all_torch_threads(tiny_model, two_torch_threads, monkeypatch):
    threads_used, _ = record_threads(tiny_model, monkeypatch)
    read_sentences(tiny_model, [["the", "old", "man"]] * 20, batch_size=4)
    assert threads_used == {threading.current_thread().name}


def test_two_lanes_build_a_grammar_and_its_leaves_once(two_torch_threads, monkeypatch):
    """The first two batches ask for the parse's grammar (and its vocabulary's leaves) at once: one thread builds
    them while the other waits, and both read the same."""
    from grammar_induce.families.pcfg.grammar import Grammar
    from grammar_induce.families.pcfg.model import TNPCFG

    pcfg = checkpoint.load(pretrained.catalogue()["ptb-pcfg"].paths[0])
    pruning = Pruning(checkpoint.load(pretrained.catalogue()["en"].paths[0]))
    built = []

    def slowly(original):
        def build(*args, **kwargs):
            built.append(original.__name__)
            time.sleep(0.05)  # the other lane asks meanwhile
            return original(*args, **kwargs)
        return build

    monkeypatch.setattr(TNPCFG, "grammar", slowly(TNPCFG.grammar))
    monkeypatch.setattr(Grammar, "_made_leaves", slowly(Grammar._made_leaves))
    threads_used, _ = record_threads(pcfg, monkeypatch)
    read_sentences(pcfg, [["the", "old", "man", "saw", "a", "dog"][: 2 + k % 5] for k in range(20)], batch_size=4,
                   pruning=pruning)
    assert len(threads_used) == 2 and sorted(built) == ["_made_leaves", "grammar"]


def test_a_pcfg_over_its_whole_chart_reads_one_batch_at_a_time(two_torch_threads, monkeypatch):
    """Its products keep both cores busy: no lanes without a pruner; the batches shortest first, as always."""
    pcfg = checkpoint.load(pretrained.catalogue()["ptb-pcfg"].paths[0])
    threads_used, lengths_read = record_threads(pcfg, monkeypatch)
    read_sentences(pcfg, [["the", "old", "man", "saw", "a", "dog"][: 2 + k % 5] for k in range(20)], batch_size=4)
    assert threads_used == {threading.current_thread().name} and lengths_read == sorted(lengths_read)


def record_threads(loaded, monkeypatch) -> tuple[set[str], list[int]]:
    """The names of the threads that call the model's read from now on, and each batch's longest sentence's length,
    in the order the reads began."""
    read, names, longest = loaded.model.read, set(), []

    def recorded(tokens, words, *args, **kwargs):
        names.add(threading.current_thread().name)
        longest.append(max(map(len, words)))
        return read(tokens, words, *args, **kwargs)

    monkeypatch.setattr(loaded.model, "read", recorded)
    return names, longest


def test_autos_probe_reads_as_the_parse_does(tiny_model, two_torch_threads, monkeypatch):
    """`--precision auto` times each member reading as read_sentences will: the student a batch in each of two
    threads at once, an ON-LSTM one batch here."""
    student = checkpoint.load(pretrained.catalogue()["en"].paths[0])
    for loaded, in_lanes in ((student, True), (tiny_model, False)):
        threads_used, lengths_read = record_threads(loaded, monkeypatch)
        parse_probe([loaded], batch_size=8).run(None)
        assert len(lengths_read) == (2 if in_lanes else 1)  # a batch in each lane (one thread may take both)
        assert all(name.startswith("grammar-induce-read") == in_lanes for name in threads_used)
