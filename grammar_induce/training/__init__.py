"""The one training loop every family runs through (loop.py), its resume state (state.py) and random generators."""
