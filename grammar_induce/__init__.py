"""Unsupervised grammar induction with ON-LSTM (Shen et al., "Ordered Neurons", ICLR 2019)."""

import warnings

# torch warns on import when numpy is absent; nothing here needs numpy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
