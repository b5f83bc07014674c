"""Unsupervised grammar induction: trees from raw text with three families of models, the ON-LSTM (Shen et al.,
ICLR 2019), the TN-PCFG (Yang et al., 2021) and the StructFormer (Shen et al., 2021), their ensembles, and a student
parser distilled from them.

The Python API (see README): `load` models by path or shipped name, `Parser.parse` sentences into
`nltk.Tree`s, `evaluate` them against gold trees, `train` a model (an ON-LSTM, a PCFG, a StructFormer) and `distill`
an ensemble into a student parser. Importing the package loads no torch; loading a
model does.
"""

import warnings as _warnings
from importlib import metadata as _metadata

# torch warns on import when numpy is absent; nothing here needs numpy.
_warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

__all__ = ["Parser", "__version__", "distill", "evaluate", "load", "sample", "samples", "to_nltk", "train"]

try:
    __version__ = _metadata.version("grammar-induce")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str):
    """The API's names, imported on first use (so `import grammar_induce` stays light)."""
    if name in ("Parser", "distill", "evaluate", "load", "sample", "samples", "to_nltk", "train"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'grammar_induce' has no attribute {name!r}")
