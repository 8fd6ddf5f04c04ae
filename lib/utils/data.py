"""rill.utils.data: Dataset, DataLoader and samplers spelled as torch.utils.data."""
