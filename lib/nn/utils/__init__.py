"""rill.nn.utils: gradient clipping and parameter/vector conversions, as torch.nn.utils."""
