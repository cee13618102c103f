"""PyTorch's side of bench/rl_ppo_bench.cpp: ppo_cartpole, CleanRL's ppo.py
end to end on CartPole (bench/np_cartpole.py, NumPy-vectorised like gym's
SyncVectorEnv but faster): 8 environments, 128-step rollouts, then 4 epochs of
4 minibatches (clipped surrogate 0.2, clipped value loss, entropy 0.01,
advantage normalisation, gradient clipping 0.5, Adam 2.5e-4 eps 1e-5) on
CleanRL's Agent (separate tanh 64-64 actor and critic). One call is one
iteration: collection, GAE and the updates. Throughput in environment steps/s."""
import numpy as np
import torch

from np_cartpole import CartPoleVec
from torch_util import emit, seconds_per_call

NUM_ENVS, NUM_STEPS, MINIBATCHES, EPOCHS = 8, 128, 4, 4
GAMMA, LAMBDA, CLIP, ENT, VF, MAX_GRAD = 0.99, 0.95, 0.2, 0.01, 0.5, 0.5


def _layer(i, o, std=np.sqrt(2)):
    layer = torch.nn.Linear(i, o)
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, 0.0)
    return layer


class Agent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.critic = torch.nn.Sequential(_layer(4, 64), torch.nn.Tanh(), _layer(64, 64), torch.nn.Tanh(),
                                          _layer(64, 1, 1.0))
        self.actor = torch.nn.Sequential(_layer(4, 64), torch.nn.Tanh(), _layer(64, 64), torch.nn.Tanh(),
                                         _layer(64, 2, 0.01))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        probs = torch.distributions.Categorical(logits=self.actor(x))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


class PPO:
    """ppo.py's loop body, the storage preallocated as CleanRL's is."""

    def __init__(self):
        torch.manual_seed(1)
        self.env = CartPoleVec(NUM_ENVS)
        self.agent = Agent()
        self.opt = torch.optim.Adam(self.agent.parameters(), lr=2.5e-4, eps=1e-5)
        shape = (NUM_STEPS, NUM_ENVS)
        self.obs = torch.zeros(shape + (4,))
        self.actions = torch.zeros(shape)
        self.logprobs = torch.zeros(shape)
        self.rewards = torch.zeros(shape)
        self.dones = torch.zeros(shape)
        self.values = torch.zeros(shape)
        self.next_obs = torch.tensor(self.env.reset(seed=1))
        self.next_done = torch.zeros(NUM_ENVS)

    def iterate(self):
        for step in range(NUM_STEPS):
            self.obs[step] = self.next_obs
            self.dones[step] = self.next_done
            with torch.no_grad():
                action, logprob, _, value = self.agent.get_action_and_value(self.next_obs)
                self.values[step] = value.flatten()
            self.actions[step] = action
            self.logprobs[step] = logprob
            obs, reward, terminated, truncated, _ = self.env.step(action.numpy())
            self.rewards[step] = torch.tensor(reward)
            self.next_obs = torch.tensor(obs)
            self.next_done = torch.tensor(np.logical_or(terminated, truncated), dtype=torch.float32)
        with torch.no_grad():
            next_value = self.agent.get_value(self.next_obs).reshape(1, -1)
            advantages = torch.zeros_like(self.rewards)
            lastgaelam = 0
            for t in reversed(range(NUM_STEPS)):
                if t == NUM_STEPS - 1:
                    nextnonterminal, nextvalues = 1.0 - self.next_done, next_value
                else:
                    nextnonterminal, nextvalues = 1.0 - self.dones[t + 1], self.values[t + 1]
                delta = self.rewards[t] + GAMMA * nextvalues * nextnonterminal - self.values[t]
                advantages[t] = lastgaelam = delta + GAMMA * LAMBDA * nextnonterminal * lastgaelam
            returns = advantages + self.values
        b_obs, b_logprobs, b_actions = self.obs.reshape(-1, 4), self.logprobs.reshape(-1), self.actions.reshape(-1)
        b_adv, b_returns, b_values = advantages.reshape(-1), returns.reshape(-1), self.values.reshape(-1)
        batch = NUM_STEPS * NUM_ENVS
        mb = batch // MINIBATCHES
        inds = np.arange(batch)
        for _ in range(EPOCHS):
            np.random.shuffle(inds)
            for start in range(0, batch, mb):
                idx = inds[start:start + mb]
                _, newlogprob, entropy, newvalue = self.agent.get_action_and_value(b_obs[idx], b_actions.long()[idx])
                logratio = newlogprob - b_logprobs[idx]
                ratio = logratio.exp()
                with torch.no_grad():
                    _approx_kl = ((ratio - 1) - logratio).mean().item()
                    _clipfrac = ((ratio - 1.0).abs() > CLIP).float().mean().item()
                adv = b_adv[idx]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg_loss = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - CLIP, 1 + CLIP)).mean()
                newvalue = newvalue.view(-1)
                v_unclipped = (newvalue - b_returns[idx]) ** 2
                v_clipped = b_values[idx] + torch.clamp(newvalue - b_values[idx], -CLIP, CLIP)
                v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - b_returns[idx]) ** 2).mean()
                loss = pg_loss - ENT * entropy.mean() + v_loss * VF
                self.opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.agent.parameters(), MAX_GRAD)
                self.opt.step()


def _ppo_cartpole(name, reps):
    np.random.seed(1)
    ppo = PPO()
    emit(name, "throughput", "steps/s", NUM_STEPS * NUM_ENVS / seconds_per_call(ppo.iterate, reps, 1.0))


def benches():
    return [("ppo_cartpole", _ppo_cartpole)]
