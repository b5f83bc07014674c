"""inference/parsing.made_uncollected: a parse's objects, and those from before it, out of the collector's passes while it runs."""

import gc

import pytest

from grammar_induce.inference.parsing import made_uncollected


@pytest.fixture
def collector_as_found():
    was = gc.isenabled()
    yield
    gc.unfreeze()
    gc.enable() if was else gc.disable()


def in_the_collectors_passes(thing) -> bool:
    return any(o is thing for o in gc.get_objects())  # the generations it collects, not the frozen objects


def test_results_are_made_with_the_collector_paused_and_frozen_until_the_last(collector_as_found):
    gc.unfreeze()
    before = [[k] for k in range(1000)]  # tracked objects alive when the parse starts
    seen = []

    def inputs():  # read with the collector running (a stream's lines may be slow to come)
        for k in range(2):
            seen.append(("read", gc.isenabled()))
            yield k

    def make(k):
        seen.append(("made", gc.isenabled(), in_the_collectors_passes(before)))
        return [[k, j] for j in range(5000)]  # past the young generation's threshold: it would collect

    made = []
    for result in made_uncollected(inputs(), make):
        # handed on frozen (the caller's collections do not rescan it), the collector running again
        assert gc.isenabled() and not in_the_collectors_passes(result) and gc.get_freeze_count() >= 6000
        made.append(result)
    assert seen == [("read", True), ("made", False, False)] * 2
    assert gc.get_freeze_count() == 0 and all(in_the_collectors_passes(r) for r in [before, *made])


def test_a_cycle_the_caller_makes_meanwhile_is_still_collected(collector_as_found):
    gc.unfreeze()
    for _ in made_uncollected([[1], [2]]):
        cycle = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1


def test_parts_stopped_early_are_thawed(collector_as_found):
    gc.unfreeze()
    parts = made_uncollected([[1], [2], [3]])
    next(parts)
    assert gc.get_freeze_count() > 0
    parts.close()
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_a_failing_part_leaves_the_collector_on_and_thawed(collector_as_found):
    gc.unfreeze()

    def make(k):
        if k == 2:
            raise ValueError("bad line")
        return [k]

    with pytest.raises(ValueError, match="bad line"):
        list(made_uncollected([1, 2], make))
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_nothing_is_done_when_the_collector_is_off_or_objects_are_frozen_already(collector_as_found):
    gc.unfreeze()
    gc.disable()
    assert [gc.isenabled() for _ in made_uncollected([1, 2])] == [False, False]
    assert gc.get_freeze_count() == 0 and not gc.isenabled()
    gc.enable()
    theirs = [0]
    gc.freeze()
    list(made_uncollected([[1], [2]]))
    # someone else's freeze is theirs to undo: their object is still out of the collector's passes afterwards
    # (the count itself may fall meanwhile, as frozen objects are freed by reference counting)
    assert gc.get_freeze_count() > 0 and not in_the_collectors_passes(theirs)


def test_a_parse_hands_on_its_results_frozen_and_leaves_everything_thawed(tiny_run, collector_as_found):
    import grammar_induce as gi

    gc.unfreeze()
    parser = gi.load(str(tiny_run / "best.pt"))
    frozen = [not in_the_collectors_passes(r.words) for r in parser.analyse_many(["the dog ran", "a cat sat"])]
    assert frozen == [True, True] and gc.get_freeze_count() == 0 and gc.isenabled()
    trees = parser.parse_many(["the dog ran", "a cat sat"])
    next(trees)
    trees.close()  # stopped early
    assert gc.get_freeze_count() == 0 and gc.isenabled()
