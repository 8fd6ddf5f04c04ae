"""rill.distributions: probability distributions with sampling, log-densities and KL terms,
spelled as torch.distributions.

>>> import rill
>>> from rill.distributions import Normal, kl_divergence
>>> p = Normal(rill.tensor([0.0]), rill.tensor([1.0]))
>>> p.log_prob(rill.tensor([0.0]))
tensor([-0.9189385])
>>> kl_divergence(p, Normal(rill.tensor([1.0]), rill.tensor([1.0])))
tensor([0.5])
"""
from . import constraints
from .distribution import Distribution
from .normal import Normal
from .uniform import Uniform
from .bernoulli import Bernoulli
from .categorical import Categorical
from .gamma import Gamma
from .beta import Beta
from .dirichlet import Dirichlet
from .multivariate_normal import MultivariateNormal
from .independent import Independent
from .kl import kl_divergence, register_kl

__all__ = ["Distribution", "Normal", "Uniform", "Bernoulli", "Categorical", "Gamma", "Beta",
           "Dirichlet", "MultivariateNormal", "Independent", "kl_divergence", "register_kl",
           "constraints"]
