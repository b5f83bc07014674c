"""Where and how things run: devices and torchrun processes, bf16 or fp32 products, run folders."""
