"""The model families, each in a folder of its own (onlstm/, pcfg/, student/, structformer/): its settings, its model
module ending in its `FAMILY` (family.py: `Family`, `Yields`) and, where it trains itself, its recipe. What every
family shares: the families by name (registry.py), the model contract (kind.py), a recipe's base and score
(recipe.py), readings (reading.py), the recipe of kinds fitted to whole sentences (sentences.py) and parse-focusing's
span votes (focus.py), checkpoints and the shipped models."""
