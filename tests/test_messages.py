from grammar_induce.messages import Messages, progress_bar


def test_no_progress_bar_when_stderr_is_not_a_terminal():
    assert progress_bar(10).disable  # pytest captures stderr


def test_messages_keep_the_notes_and_pass_each_on_as_it_comes():
    said, told, counted = [], [], []
    messages = Messages(say=said.append, tell=told.append, progress=counted.append)
    messages.say("epoch 1: valid ppl 120.00")
    messages.note("--workers 4 capped at 1")
    messages.advance(3)
    messages.advance(2)
    assert said == ["epoch 1: valid ppl 120.00"] and told == messages.notes == ["--workers 4 capped at 1"]
    assert counted == [3, 2]
    quiet = Messages()  # the default: nothing said or shown, the notes kept for the caller
    quiet.say("epoch 1")
    quiet.advance(5)
    quiet.note("kept")
    assert quiet.notes == ["kept"]


def test_a_long_message_is_cut_between_words_and_says_so():
    from grammar_induce.messages import clipped

    text = "size mismatch for layers.1.hh.weight: copying a param with shape torch.Size([4830, 1150]) from checkpoint"
    cut = clipped(text, 60)
    assert len(cut) <= 60 and cut.endswith("...") and text.startswith(cut[:-3])
    assert text[len(cut) - 3] == " "  # the cut falls at a space: no word is cut in two
    assert clipped("short\nsecond line", 60) == "short" and clipped("", 10) == ""
