"""Glue for other libraries (spaCy); nothing else in grammar_induce imports it."""
