"""Batches read two at a time on a CPU (runtime/threads.py): in order, on two threads with half of torch's threads
each, the same trees as one at a time; only by the kinds that read so."""

import threading
import time

import pytest
import torch

from grammar_induce.families import checkpoint, pretrained
from grammar_induce.inference.members import parse_probe, read_sentences
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


def test_a_students_trees_in_two_threads_are_those_read_one_batch_at_a_time(two_torch_threads, monkeypatch):
    """Each thread reads with one torch thread: the same arithmetic as reading alone on one."""
    student = checkpoint.load(pretrained.catalogue()["en"].paths[0])
    assert student.family.reads_in_lanes
    words = "the old man saw a dog near the river and the cat sat on the mat".split()
    sentences = [words[k % 5 : k % 5 + 3 + k % 11] for k in range(60)]
    torch.set_num_threads(1)
    alone = read_sentences(student, sentences, batch_size=8)
    torch.set_num_threads(2)
    threads_used = record_threads(student, monkeypatch)
    together = read_sentences(student, sentences, batch_size=8)
    assert len(threads_used) == 2 and [r.parsed_tree for r in together] == [r.parsed_tree for r in alone]


def test_an_onlstm_reads_one_batch_at_a_time_with_all_torch_threads(tiny_model, two_torch_threads, monkeypatch):
    threads_used = record_threads(tiny_model, monkeypatch)
    read_sentences(tiny_model, [["the", "old", "man"]] * 20, batch_size=4)
    assert threads_used == {threading.current_thread().name}


def record_threads(loaded, monkeypatch) -> set[str]:
    """The names of the threads that call the model's read from now on."""
    read, names = loaded.model.read, set()

    def recorded(*args, **kwargs):
        names.add(threading.current_thread().name)
        return read(*args, **kwargs)

    monkeypatch.setattr(loaded.model, "read", recorded)
    return names


def test_autos_probe_reads_as_the_parse_does(tiny_model, two_torch_threads, monkeypatch):
    """`--precision auto` times each member reading as read_sentences will: the student a batch in each of two
    threads at once, an ON-LSTM one batch here."""
    student = checkpoint.load(pretrained.catalogue()["en"].paths[0])
    for loaded, expected in ((student, 2), (tiny_model, 1)):
        threads_used = record_threads(loaded, monkeypatch)
        parse_probe([loaded], batch_size=8).run(None)
        assert len(threads_used) == expected
