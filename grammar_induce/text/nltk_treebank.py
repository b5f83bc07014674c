"""nltk's Penn Treebank word tokenizer, its own tables of patterns, run for less.

nltk's TreebankWordTokenizer rewrites a line with 26 substitutions in a row. Two things cost more than
the rewriting itself: nltk 3.10 runs each pattern through a guard against runaway patterns (the `regex`
engine under a wall-clock timeout, meant for patterns callers supply), and each substitution scans the
whole line although most find nothing in most lines. Here the tables are compiled by the standard library's
`re`, as nltk before 3.10 compiled them, and a substitution scans a line only when the line holds what
every match of its pattern holds (an apostrophe, a bracket, the letters of `gonna`). The tokens are nltk's
(tests/test_tokenizer.py compares them, line by line).
"""

from __future__ import annotations

import functools
import re

# What a match of each pattern (nltk's text of it) must hold: one of these characters. A pattern not listed
# here (nltk changed its tables, or the check would cost as much as the pattern) scans every line.
_NEEDS = {
    r"(``)": "`",
    r"([ \(\[{<])(\"|\'{2})": "\"'",
    r"([:,])([^\d])": ":,",
    r"([:,])$": ":,",
    r"[;@#$%&]": ";@#$%&",
    r'([^\.])(\.)([\]\)}>"\']*)\s*$': ".",
    r"[?!]": "?!",
    r"([^'])' ": "'",
    r"[\]\[\(\)\{\}\<\>]": "[](){}<>",
    r"([^' ])('[sS]|'[mM]|'[dD]|') ": "'",
    r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ": "'",
}
# a contraction's pattern: a word (case aside) split in two, as `(?i)\b(gon)(?#X)(na)\b`; it needs that word
_CONTRACTION = re.compile(r"\(\?i\)( ?)(?:\\b)?\(([a-z']+)\)\(\?#X\)\(([a-z']+)\)(?:\\b|\(\?=\\s\))")


@functools.cache
def treebank_tokenizer():
    """nltk's TreebankWordTokenizer (it needs no downloaded data) with every pattern of its tables compiled by
    `re` and checked for before it scans a line."""
    from nltk.tokenize import TreebankWordTokenizer

    tokenizer = TreebankWordTokenizer()
    for name in ("STARTING_QUOTES", "PUNCTUATION", "ENDING_QUOTES", "CONVERT_PARENTHESES"):
        setattr(tokenizer, name, [(_checked(pattern), text) for pattern, text in getattr(tokenizer, name)])
    for name in ("PARENS_BRACKETS", "DOUBLE_DASHES"):
        pattern, text = getattr(tokenizer, name)
        setattr(tokenizer, name, (_checked(pattern), text))
    for name in ("CONTRACTIONS2", "CONTRACTIONS3"):
        setattr(tokenizer, name, [_checked(pattern) for pattern in getattr(tokenizer, name)])
    return tokenizer


class _Checked:
    """A compiled pattern whose `sub` leaves a line alone, unscanned, when the line lacks what every match holds."""

    def __init__(self, pattern: re.Pattern, characters: str = "", word: str = ""):
        self.compiled, self.characters, self.word = pattern, characters, word

    def sub(self, replacement: str, text: str) -> str:
        if self.characters and not any(c in text for c in self.characters):
            return text
        if self.word and text.isascii() and self.word not in text.lower():  # (?i) on ASCII text: lower() is exact
            return text
        return self.compiled.sub(replacement, text)


def _checked(pattern) -> _Checked | re.Pattern:
    """A pattern of nltk's (a `re.Pattern` before 3.10, a guarded `regex` one since) compiled by `re` (the flags
    both engines number alike kept), checked for first where its text says what a match holds."""
    text = pattern.pattern
    compiled = pattern if isinstance(pattern, re.Pattern) else re.compile(
        text, pattern.flags & (re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE))
    if text in _NEEDS:
        return _Checked(compiled, characters=_NEEDS[text])
    if contraction := _CONTRACTION.fullmatch(text):
        return _Checked(compiled, word="".join(contraction.groups()))
    return compiled
