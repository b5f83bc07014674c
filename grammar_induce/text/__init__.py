"""Text in: tokenizers and vocabularies, the corpus cache, gold treebanks and their presets."""
