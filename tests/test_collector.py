"""runtime/collector.py: the objects from before a parse left out of the collector's passes while it runs."""

import gc

import pytest

from grammar_induce.runtime.collector import older_objects_frozen


@pytest.fixture
def collector_as_found():
    was = gc.isenabled()
    yield
    gc.unfreeze()
    gc.enable() if was else gc.disable()


def in_the_collectors_passes(thing) -> bool:
    return any(o is thing for o in gc.get_objects())  # the generations it collects, not the frozen objects


def test_the_objects_from_before_are_frozen_inside_and_thawed_after(collector_as_found):
    gc.unfreeze()
    before = [[k] for k in range(1000)]  # tracked objects alive when the block starts

    with older_objects_frozen():
        assert gc.get_freeze_count() >= len(before)
        made = [0]
        assert in_the_collectors_passes(made) and not in_the_collectors_passes(before)
    assert gc.get_freeze_count() == 0 and in_the_collectors_passes(before)


def test_a_cycle_made_inside_is_still_collected(collector_as_found):
    gc.unfreeze()
    with older_objects_frozen():
        cycle = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1


def test_nothing_is_done_when_the_collector_is_off_or_objects_are_frozen_already(collector_as_found):
    gc.unfreeze()
    gc.disable()
    with older_objects_frozen():
        assert gc.get_freeze_count() == 0
    gc.enable()
    theirs = [0]
    gc.freeze()
    with older_objects_frozen():
        pass
    # someone else's freeze is theirs to undo: their object is still out of the collector's passes afterwards
    # (the count itself may fall meanwhile, as frozen objects are freed by reference counting)
    assert gc.get_freeze_count() > 0 and not in_the_collectors_passes(theirs)


def test_a_parse_runs_with_the_older_objects_frozen_and_leaves_them_thawed(tiny_run, collector_as_found):
    import grammar_induce as gi

    gc.unfreeze()
    counts = []
    for _ in gi.load(str(tiny_run / "best.pt")).parse_many(["the dog ran", "a cat sat"]):
        counts.append(gc.get_freeze_count())
    assert all(count > 0 for count in counts) and gc.get_freeze_count() == 0
