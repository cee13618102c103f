"""Goldens for tests/rl/dqn_test.cpp and tests/rl/sac_test.cpp (kiln/rl/dqn.h, kiln/rl/sac.h).

rl_dqn.json: one update of CleanRL's dqn.py (its QNetwork, TD target and
Adam step, written out below) from fixed online and target weights on a
fixed batch of CartPole-shaped transitions, for the squared and the Huber
(F.smooth_l1_loss) TD loss, with and without double DQN: the loss, mean
Q(s, a), the gradients and the weights after the step, and a polyak target
update (tau 0.5) after it.

rl_sac.json: one update of CleanRL's sac_continuous_action.py with fixed
alpha on Pendulum shapes, from fixed actor, critic and target weights on a
fixed batch, with the standard normal noise of the two reparameterised
draws given (kiln's generator is not torch's): the critic step (target y,
both MSE losses, the critics after Adam), then the actor step on the
updated critics (loss, mean log pi, the actor after Adam), then the polyak
update of the targets. One deliberate difference from CleanRL: the squashed
log-density is the exact one kiln's TanhGaussian uses, log N(u) - log|d
action / du| through torch's TanhTransform, not CleanRL's
log(scale (1 - tanh(u)^2) + 1e-6).
"""
import math

import torch
from torch import nn
from torch.distributions import Normal
from torch.distributions.transforms import TanhTransform
import torch.nn.functional as F

from . import common


def _sd(module):
    return {k: common.t(v) for k, v in module.state_dict().items()}


def _grads(module):
    return {k: common.t(p.grad) for k, p in module.named_parameters()}


def _soft_update(target, online, tau):
    with torch.no_grad():
        for tp, p in zip(target.parameters(), online.parameters()):
            tp.data.copy_(tau * p.data + (1.0 - tau) * tp.data)


class QNetwork(nn.Module):  # CleanRL dqn.py, hidden sizes as arguments
    def __init__(self, obs, n, h1, h2):
        super().__init__()
        self.network = nn.Sequential(nn.Linear(obs, h1), nn.ReLU(), nn.Linear(h1, h2), nn.ReLU(), nn.Linear(h2, n))

    def forward(self, x):
        return self.network(x)


def _dqn_batch(B):
    g = common.gen(31)
    obs = torch.randn(B, 4, generator=g) * 0.5
    next_obs = obs + torch.randn(B, 4, generator=g) * 0.1
    action = torch.randint(0, 2, (B,), generator=g)
    reward = torch.ones(B)
    terminated = torch.zeros(B, dtype=torch.bool)
    terminated[[1, 5]] = True
    return obs, action, reward, next_obs, terminated


def _dqn_case(huber, double_q):
    B, gamma, lr, tau = 8, 0.99, 1e-2, 0.5
    torch.manual_seed(7)  # the same start in every case
    q = QNetwork(4, 2, 8, 6)
    target = QNetwork(4, 2, 8, 6)  # other weights: the test sees which network gives which values
    obs, action, reward, next_obs, terminated = _dqn_batch(B)
    opt = torch.optim.Adam(q.parameters(), lr=lr)
    with torch.no_grad():
        if double_q:
            next_action = q(next_obs).argmax(1, keepdim=True)
            target_max = target(next_obs).gather(1, next_action).squeeze(1)
        else:
            target_max, _ = target(next_obs).max(dim=1)
        td_target = reward + gamma * target_max * (1 - terminated.float())
    old_val = q(obs).gather(1, action.unsqueeze(1)).squeeze()
    loss = F.smooth_l1_loss(td_target, old_val) if huber else F.mse_loss(td_target, old_val)
    opt.zero_grad()
    loss.backward()
    grads = _grads(q)
    opt.step()
    after_q = _sd(q)
    _soft_update(target, q, tau)
    return {
        "name": f"{'huber' if huber else 'mse'}{', double' if double_q else ''}",
        "args": {"huber": huber, "double_q": double_q},
        "out": {"loss": loss.item(), "q_value": old_val.mean().item(), "grads": grads, "q_after": after_q,
                "target_after": _sd(target)},
    }


class SoftQNetwork(nn.Module):  # CleanRL sac_continuous_action.py
    def __init__(self, obs, act, h):
        super().__init__()
        self.fc1 = nn.Linear(obs + act, h)
        self.fc2 = nn.Linear(h, h)
        self.fc3 = nn.Linear(h, 1)

    def forward(self, x, a):
        x = torch.cat([x, a], 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


LOG_STD_MAX, LOG_STD_MIN = 2, -5


class Actor(nn.Module):  # CleanRL's, with the noise given and the exact log-density
    def __init__(self, obs, act, h, low, high):
        super().__init__()
        self.fc1 = nn.Linear(obs, h)
        self.fc2 = nn.Linear(h, h)
        self.fc_mean = nn.Linear(h, act)
        self.fc_logstd = nn.Linear(h, act)
        self.scale = (high - low) / 2.0
        self.bias = (high + low) / 2.0

    def forward(self, x):
        x = F.relu(self.fc2(F.relu(self.fc1(x))))
        mean = self.fc_mean(x)
        log_std = torch.tanh(self.fc_logstd(x))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
        return mean, log_std

    def get_action(self, x, eps):
        mean, log_std = self(x)
        std = log_std.exp()
        normal = Normal(mean, std)
        x_t = mean + std * eps  # normal.rsample() with this noise
        y_t = torch.tanh(x_t)
        action = y_t * self.scale + self.bias
        log_prob = normal.log_prob(x_t) - TanhTransform().log_abs_det_jacobian(x_t, y_t) - math.log(self.scale)
        return action, log_prob.sum(1)


def _sac():
    B, O, A, H = 8, 3, 1, 8
    gamma, tau, alpha, q_lr, policy_lr = 0.99, 0.005, 0.2, 1e-3, 3e-4
    torch.manual_seed(11)
    actor = Actor(O, A, H, -2.0, 2.0)
    qf1, qf2 = SoftQNetwork(O, A, H), SoftQNetwork(O, A, H)
    qf1_t, qf2_t = SoftQNetwork(O, A, H), SoftQNetwork(O, A, H)
    start = {"actor": _sd(actor), "qf1": _sd(qf1), "qf2": _sd(qf2), "qf1_target": _sd(qf1_t),
             "qf2_target": _sd(qf2_t)}
    g = common.gen(41)
    obs = torch.randn(B, O, generator=g)
    next_obs = obs + 0.1 * torch.randn(B, O, generator=g)
    action = torch.rand(B, A, generator=g) * 4 - 2
    reward = -torch.rand(B, generator=g) * 5
    terminated = torch.zeros(B, dtype=torch.bool)
    terminated[3] = True
    next_noise = torch.randn(B, A, generator=g)
    actor_noise = torch.randn(B, A, generator=g)
    q_opt = torch.optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=q_lr)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=policy_lr)

    with torch.no_grad():
        next_actions, next_log_pi = actor.get_action(next_obs, next_noise)
        min_next = torch.min(qf1_t(next_obs, next_actions), qf2_t(next_obs, next_actions)) - alpha * next_log_pi.unsqueeze(1)
        next_q_value = reward + (1 - terminated.float()) * gamma * min_next.view(-1)
    qf1_a = qf1(obs, action).view(-1)
    qf2_a = qf2(obs, action).view(-1)
    qf1_loss = F.mse_loss(qf1_a, next_q_value)
    qf2_loss = F.mse_loss(qf2_a, next_q_value)
    q_opt.zero_grad()
    (qf1_loss + qf2_loss).backward()
    q_opt.step()
    critic = {"y": common.t(next_q_value), "qf1_loss": qf1_loss.item(), "qf2_loss": qf2_loss.item(),
              "qf1_value": qf1_a.mean().item(), "qf2_value": qf2_a.mean().item(), "qf1": _sd(qf1), "qf2": _sd(qf2)}

    pi, log_pi = actor.get_action(obs, actor_noise)
    min_qf_pi = torch.min(qf1(obs, pi), qf2(obs, pi)).view(-1)
    actor_loss = ((alpha * log_pi) - min_qf_pi).mean()
    actor_opt.zero_grad()
    actor_loss.backward()
    actor_grads = _grads(actor)
    actor_opt.step()
    actor_out = {"loss": actor_loss.item(), "log_pi": log_pi.mean().item(), "grads": actor_grads,
                 "actor": _sd(actor)}

    _soft_update(qf1_t, qf1, tau)
    _soft_update(qf2_t, qf2, tau)
    return {
        "args": {"gamma": gamma, "tau": tau, "alpha": alpha, "q_lr": q_lr, "policy_lr": policy_lr, "hidden": H},
        "start": start,
        "batch": {"obs": common.t(obs), "action": common.t(action), "reward": common.t(reward),
                  "next_obs": common.t(next_obs), "terminated": common.t(terminated)},
        "next_noise": common.t(next_noise), "actor_noise": common.t(actor_noise),
        "critic": critic, "actor": actor_out,
        "targets_after": {"qf1_target": _sd(qf1_t), "qf2_target": _sd(qf2_t)},
    }


def _dqn():
    torch.manual_seed(7)
    q, target = QNetwork(4, 2, 8, 6), QNetwork(4, 2, 8, 6)
    obs, action, reward, next_obs, terminated = _dqn_batch(8)
    return {
        "args": {"gamma": 0.99, "learning_rate": 1e-2, "tau": 0.5, "hidden": [8, 6]},
        "q": _sd(q), "target": _sd(target),
        "batch": {"obs": common.t(obs), "action": common.t(action), "reward": common.t(reward),
                  "next_obs": common.t(next_obs), "terminated": common.t(terminated)},
        "cases": [_dqn_case(h, d) for h in (False, True) for d in (False, True)],
    }


def generate():
    common.dump("rl_dqn", _dqn())
    common.dump("rl_sac", _sac())
