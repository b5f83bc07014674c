"""The models: kinds by name (registry.py), the ON-LSTM (readable cell, fast engine, C step), the span parser
and its tree CRF, checkpoints, the shipped models."""
