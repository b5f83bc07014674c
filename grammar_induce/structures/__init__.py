"""Structures as objects: distributions over trees and their searches, what model families and span voting share
(tree_crf.py: the tree CRF in a semiring; cky.py + cky.c: the best tree of span scores). They know no model."""
