"""What the commands do: train, parse, evaluate (scoring), distill. Each imports inference, families, text,
output and the core, never another workflow."""
