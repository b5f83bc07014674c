"""The words of a file of bracketed trees, a sentence per line (-NONE- leaves left out): the held-out text of
the Chinese runs, written from the CTB development trees.

    python scripts/experiments/trees_to_text.py TREES TEXT
"""

import sys

from nltk import Tree

with open(sys.argv[1], encoding="utf-8") as trees, open(sys.argv[2], "w", encoding="utf-8") as text:
    for line in trees:
        if line.strip():
            text.write(" ".join(w for w, tag in Tree.fromstring(line).pos() if tag != "-NONE-") + "\n")
