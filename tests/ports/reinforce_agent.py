"""A REINFORCE policy-gradient agent on a tiny pure-Python corridor, written as a PyTorch program.

The agent starts at the left end of a corridor and is rewarded for reaching the right end
quickly. A small MLP policy gives action logits; actions are drawn from a Categorical;
discounted returns are normalized and weight the log-probabilities. tests/ports/test_ports.py
runs this file once as written and once with only the import block swapped for rill's.
"""
# --- imports: the only lines that change between PyTorch and rill ---
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical
# --- end of imports ---

EPS = np.finfo(np.float32).eps.item()


class Corridor:
    """Positions 0 .. length-1; action 0 steps left, 1 steps right; the episode ends at the right
    end (reward +1) or after max_steps (each step costs 0.05)."""

    def __init__(self, length=6, max_steps=20):
        self.length = length
        self.max_steps = max_steps

    def reset(self):
        self.position = 0
        self.steps = 0
        return self.observe()

    def observe(self):
        state = [0.0] * self.length
        state[self.position] = 1.0
        return state

    def step(self, action):
        self.steps += 1
        self.position = max(0, min(self.length - 1, self.position + (1 if action == 1 else -1)))
        done = self.position == self.length - 1
        reward = 1.0 if done else -0.05
        return self.observe(), reward, done or self.steps >= self.max_steps


class Policy(nn.Module):
    def __init__(self, n_states=6, n_actions=2, hidden=16):
        super().__init__()
        self.affine1 = nn.Linear(n_states, hidden)
        self.affine2 = nn.Linear(hidden, n_actions)
        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        return self.affine2(F.relu(self.affine1(x)))


def build_model(seed=0):
    torch.manual_seed(seed)
    return Policy()


def select_action(policy, state, forced_action=None):
    """Samples an action (or takes forced_action, to replay a recorded episode) and saves its
    log-probability on the policy."""
    logits = policy(torch.tensor(state).unsqueeze(0))
    m = Categorical(logits=logits)
    action = m.sample() if forced_action is None else torch.tensor([forced_action])
    policy.saved_log_probs.append(m.log_prob(action))
    return action.item()


def run_episode(env, policy, actions=None):
    """Plays one episode, saving rewards on the policy; replays `actions` when given. Returns the
    actions taken."""
    state = env.reset()
    taken = []
    done = False
    while not done:
        forced = None if actions is None else actions[len(taken)]
        action = select_action(policy, state, forced)
        state, reward, done = env.step(action)
        policy.rewards.append(reward)
        taken.append(action)
    return taken


def finish_episode(policy, optimizer, gamma=0.99):
    """One REINFORCE update from what the policy saved; returns the policy loss."""
    R = 0.0
    returns = []
    for r in policy.rewards[::-1]:
        R = r + gamma * R
        returns.insert(0, R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + EPS)
    policy_loss = []
    for log_prob, R in zip(policy.saved_log_probs, returns):
        policy_loss.append(-log_prob * R)
    optimizer.zero_grad()
    loss = torch.stack(policy_loss).sum()
    loss.backward()
    optimizer.step()
    del policy.rewards[:]
    del policy.saved_log_probs[:]
    return loss.item()


def make_optimizer(policy, lr=0.02):
    return optim.Adam(policy.parameters(), lr=lr)


def train(policy, episodes=60, seed=0):
    """Returns the undiscounted return of every episode."""
    torch.manual_seed(seed)
    env = Corridor()
    optimizer = make_optimizer(policy)
    episode_returns = []
    running_reward = 0.0
    for i_episode in range(episodes):
        run_episode(env, policy)
        ep_reward = sum(policy.rewards)
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        finish_episode(policy, optimizer)
        episode_returns.append(ep_reward)
    return episode_returns


def right_probabilities(policy, n_states=6):
    """The probability of stepping right in every state, as a list."""
    with torch.no_grad():
        return F.softmax(policy(torch.eye(n_states)), dim=1)[:, 1].tolist()


def main():
    returns = train(build_model(), episodes=200)
    print(f"mean return: first 20 episodes {sum(returns[:20]) / 20:.3f}, "
          f"last 20 {sum(returns[-20:]) / 20:.3f}")


if __name__ == "__main__":
    main()
