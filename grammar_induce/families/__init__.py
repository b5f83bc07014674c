"""The model families, each in a folder of its own (onlstm/, pcfg/, student/): a kind's model and, where it trains
itself, its recipe; what every family shares: the interface (base.py), kinds by name (registry.py), readings,
the tree CRF and CKY (structures/), the recipe of kinds fitted to whole sentences (sentences.py), the one training
loop (training.py), checkpoints and the shipped models."""
