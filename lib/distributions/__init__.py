"""rill.distributions: probability distributions with sampling, log-densities and KL terms,
spelled as torch.distributions."""
