"""Structures as objects: distributions over trees and their searches, what model families and span voting share
(tree_crf.py: the tree CRF in a semiring; rank_cfg.py: a CFG whose rules factor through a rank, as TN-PCFG's, with
its sums over split points in C, rank_sums.py + split_points.c; cky.py + cky.c: the best tree of span scores). They
know no model."""
