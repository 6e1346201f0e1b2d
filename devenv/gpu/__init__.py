"""GPU data (L0): nvidia-smi parsing, samples, and the words and numbers shown for them."""
