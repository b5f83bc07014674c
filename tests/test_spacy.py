"""The spaCy pipeline component (grammar_induce/integrations/spacy_component.py), reached the way users reach
it: by its factory name through the `spacy_factories` entry point. Skipped where spaCy is not installed."""

import pytest

import grammar_induce
from grammar_induce import trees
from grammar_induce.errors import InputError
from grammar_induce.families import pretrained

spacy = pytest.importorskip("spacy")

TEXT = "The old man's dog didn't bark. The cat sat on the \"mat\" (a rug), didn't it?"


def english(model, **config):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("grammar_induce", config={"model": model, **config})
    return nlp


@pytest.fixture(scope="module")
def nlp():
    return english(pretrained.DEFAULT_MODEL)


def test_the_readme_example(nlp):
    doc = nlp("The old man's dog didn't bark. The cat sat on the mat.")
    sent = next(iter(doc.sents))
    assert sent._.parse_string.startswith("(X ") and sent._.parse_string.count("(X") == len(sent) - 1  # binary
    constituents = list(sent._.constituents)
    assert constituents[0] == sent and {c.text for c in constituents} >= {t.text for t in sent}
    assert len(sent._.children) == 2 and all(child._.parent == sent for child in sent._.children)
    assert sent._.parent is None and sent._.labels == ()
    assert sent._.tree.leaves() == [t.text for t in sent]


def test_every_token_of_the_sentence_is_a_leaf_in_order(nlp):
    doc = nlp(TEXT)
    for sent in doc.sents:
        assert sent._.tree.leaves() == [t.text for t in sent]
        spans = [c for c in sent._.constituents]
        for span in spans:  # children tile their parent
            if len(span) > 1:
                assert [t.i for child in span._.children for t in child] == [t.i for t in span]


def test_no_sentence_boundaries_parse_the_whole_doc():
    nlp = spacy.blank("en")
    nlp.add_pipe("grammar_induce", config={"model": pretrained.DEFAULT_MODEL})
    doc = nlp("the dog barked . the cat sat")
    assert doc[:]._.tree.leaves() == [t.text for t in doc]


def test_pipe_over_many_documents_gives_the_trees_of_one_at_a_time(nlp):
    texts = [TEXT, "Profits rose.", "A b c d e f g. H i.", ""] * 3
    piped = [[s._.parse_string for s in doc.sents] if len(doc) else [] for doc in nlp.pipe(texts, batch_size=5)]
    alone = [[s._.parse_string for s in nlp(text).sents] if text else [] for text in texts]
    assert piped == alone and piped[0]


def test_the_same_trees_as_the_api_on_the_same_tokens(nlp):
    import grammar_induce as gi

    doc = nlp(TEXT)
    parser = gi.load(pretrained.DEFAULT_MODEL)
    for sent in doc.sents:
        expected = next(parser.parse_many([[t.text for t in sent]]))
        assert sent._.tree == expected


def test_an_ensemble_and_parse_options_through_the_config(tiny_run, tiny_backward_run):
    pair = english([str(tiny_run / "best.pt"), str(tiny_backward_run / "best.pt")], layer="auto", decoder="gap")
    component = pair.get_pipe("grammar_induce")
    assert len(component.parser.models) == 2 and component.parser.options.decoder == "gap"
    doc = pair("the dog saw a cat . a cat saw the dog")
    assert [t for s in doc.sents for t in trees.leaves(trees.parse_brackets(
        s._.parse_string.replace("(X ", "(")))] == [t.text for t in doc]


def test_to_disk_and_load_round_trip(nlp, tiny_run, tmp_path):
    nlp.to_disk(tmp_path / "shipped")
    assert not (tmp_path / "shipped" / "grammar_induce" / "models").exists()  # a name: no weights copied
    again = spacy.load(tmp_path / "shipped")
    assert [s._.parse_string for s in again(TEXT).sents] == [s._.parse_string for s in nlp(TEXT).sents]

    local = tmp_path / "local.pt"
    local.write_bytes((tiny_run / "best.pt").read_bytes())
    mine = english(str(local))
    mine.to_disk(tmp_path / "mine")
    local.unlink()  # the copy beside the pipeline is what loads
    loaded = spacy.load(tmp_path / "mine")
    assert [s._.parse_string for s in loaded("a b c . d e").sents] == [s._.parse_string for s in mine("a b c . d e").sents]


def test_a_bad_model_name_or_setting_is_one_line_at_add_pipe():
    with pytest.raises(InputError, match="^nope: no such checkpoint file, nor a model name") as e:
        english("nope")
    assert "\n" not in str(e.value)
    with pytest.raises(InputError, match="^decoder must be one of paper, gap, not 'bogus'$"):
        english(pretrained.DEFAULT_MODEL, decoder="bogus")


@pytest.mark.skipif("zh" not in pretrained.catalogue(), reason="no Chinese model in this installation")
def test_chinese_with_the_jieba_segmenter():
    pytest.importorskip("jieba")
    nlp = spacy.blank("zh", config={"nlp": {"tokenizer": {"segmenter": "jieba"}}})
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("grammar_induce", config={"model": "zh"})
    doc = nlp("新华社北京二月十二日电，中国十四个边境开放城市经济建设成就显著。")
    for sent in doc.sents:
        assert sent._.tree.leaves() == [t.text for t in sent]
        assert "".join(sent._.tree.leaves()) == sent.text.replace(" ", "")


def test_pipe_with_worker_processes_returns_the_same_trees(nlp):
    texts = ["The dog barked. A cat sat.", "Birds sing in the old tree."] * 3
    alone = [[s._.parse_string for s in doc.sents] for doc in nlp.pipe(texts)]
    parallel = [[s._.parse_string for s in doc.sents] for doc in nlp.pipe(texts, n_process=2, batch_size=2)]
    assert parallel == alone


def test_whitespace_tokens_are_no_leaves_and_brackets_are_written_as_the_treebank_does(nlp):
    import nltk

    doc = nlp("The dog  \n barked (loudly) .")
    sent = doc[:]
    assert sent._.parse_string.count("(X") == 6  # 7 leaves: 6 nodes, and no leaf of whitespace
    read = nltk.Tree.fromstring(sent._.parse_string)
    assert read.leaves() == ["The", "dog", "barked", "-LRB-", "loudly", "-RRB-", "."]
    assert sent._.tree.leaves() == ["The", "dog", "barked", "(", "loudly", ")", "."]
    assert all(not c.text.isspace() for c in sent._.constituents)
    assert nlp("   \n\n  \t ")[:]._.parse_string is None


def test_an_empty_model_list_is_refused():
    with pytest.raises(ValueError, match="model is an empty list"):
        english([])


def test_induced_labels_survive_serialisation_and_worker_processes():
    """Labels were kept as a dict keyed by tuples, which spaCy's msgpack gives back keyed by lists: reading a doc
    back, and nlp.pipe(n_process=2), failed (`unhashable type: 'list'`)."""
    from spacy.tokens import Doc

    nlp = english("ptb-pcfg", labels=True)
    doc = nlp(TEXT)
    strings = [sent._.parse_string for sent in doc.sents]
    assert any("(NT-" in s for s in strings)
    again = Doc(nlp.vocab).from_bytes(doc.to_bytes())
    assert [sent._.parse_string for sent in again.sents] == strings
    assert [[c.text for c in sent._.constituents] for sent in again.sents] == \
        [[c.text for c in sent._.constituents] for sent in doc.sents]
    in_workers = list(nlp.pipe([TEXT, TEXT], n_process=2))
    assert [[sent._.parse_string for sent in d.sents] for d in in_workers] == [strings, strings]


def test_a_tree_as_deep_as_a_long_line_is_stored_read_and_written():
    from spacy.tokens import Doc

    nlp = english("ptb-pcfg")  # past 150 words its tree is right-branching: as deep as the line
    words = ["dog"] * 1200
    doc = nlp(Doc(nlp.vocab, words=words))
    sent = doc[:]
    assert sent._.parse_string.count("(X") == 1199 and trees.leaves(trees.from_nested(sent._.tree)) == words
    again = Doc(nlp.vocab).from_bytes(doc.to_bytes())
    assert again[:]._.parse_string == sent._.parse_string and len(list(again[:]._.constituents)) == 2399


def test_each_constituent_has_the_confidence_the_api_gives_it_and_it_survives_serialisation():
    from spacy.tokens import Doc

    nlp = english("ptb-pcfg", confidence=True)
    doc = nlp("The old man saw a dog in the park.")
    sent = next(doc.sents)
    words = [t.text for t in sent if not t.is_punct]
    result = grammar_induce.load("ptb-pcfg", confidence=True).analyse(sent.text)
    by_words = {" ".join(result.words[s.start : s.end]): s.confidence for s in result.spans}
    found = {" ".join(t.text for t in c if not t.is_punct): c._.induced_confidence
             for c in sent._.constituents if c._.induced_confidence is not None}
    assert found == pytest.approx(by_words) and len(found) == len(words) - 1  # a binary tree: n - 1 constituents
    assert all(c._.induced_confidence is None for c in sent._.constituents if len(c) == 1)
    again = Doc(nlp.vocab).from_bytes(doc.to_bytes())
    assert [c._.induced_confidence for c in next(again.sents)._.constituents] == \
        [c._.induced_confidence for c in sent._.constituents]
    assert all(c._.induced_confidence is None for c in next(english("ptb-pcfg")(doc.text).sents)._.constituents)


def test_the_component_takes_loads_maps_and_chart_constraints_in_its_config(tmp_path):
    """issue 81, class 13: the options of `load` go in the component's config: a label map (labels renamed), a
    calibration map, chart constraints."""
    nlp = english("ptb-pcfg", labels=True, label_map="ptb-pcfg", prune="off", confidence=True)
    sent = next(iter(nlp("The old man saw a dog in the park.").sents))
    assert not any(label.startswith("NT-") for span in sent._.constituents for label in span._.labels)
    assert nlp.get_pipe("grammar_induce").parser.options.pruning is None
    assert english("ptb-pcfg", prune_threshold=0.01).get_pipe("grammar_induce").parser.options.pruning.threshold == 0.01


def test_a_sentence_says_the_mass_its_pruned_chart_kept_as_the_api_does():
    """`prune_mass` in the config: each sentence's `kept_mass` (the API's, for the same words), kept through
    serialisation; None where it was not asked."""
    from spacy.tokens import Doc

    nlp = english("ptb-pcfg", prune_mass=True)
    doc = nlp("The old man saw a dog in the park. Profits rose sharply in the third quarter.")
    found = [sent._.kept_mass for sent in doc.sents]
    parser = grammar_induce.load("ptb-pcfg", prune_mass=True)  # the same sentences in one batch, as the component reads
    assert found == pytest.approx([r.members[0].kept_mass for r in parser.analyse_many([s.text for s in doc.sents])])
    assert all(0 < share <= 1 for share in found)
    assert [s._.kept_mass for s in Doc(nlp.vocab).from_bytes(doc.to_bytes()).sents] == found
    assert next(english("ptb-pcfg")("The old man saw a dog.").sents)._.kept_mass is None
