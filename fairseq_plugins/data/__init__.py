"""Dataset wrappers (target reordering for multi-token decoders)."""
