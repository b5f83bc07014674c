"""Unsupervised grammar induction with ON-LSTM (Shen et al., "Ordered Neurons", ICLR 2019)."""

import os
import warnings

# torch warns on import when numpy is absent; nothing here needs numpy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

# Put large CPU tensors on transparent huge pages (read by torch at its first large allocation).
# A training batch allocates hundreds of MB of fresh activations and gradients; faulting them in
# 4 KiB pages costs about 5% of a CPU training step (scripts/benchmark.py). Set it to 0 to opt out.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
