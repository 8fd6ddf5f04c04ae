"""Complete PyTorch programs that run on rill with only their imports changed (issue 17)."""
