"""PyTorch's side of bench/train_rl_bench.cpp: actor-critic MLP 4-64-64-(2+1)
tanh (shared trunk, policy head of 2 logits, value head of 1).
ppo_update_b64: one PPO update per call on a fixed synthetic batch of 64
(clipped surrogate, clip 0.2, + 0.5 value MSE - 0.01 mean entropy; Adam lr
3e-4; forward, loss, backward, step, zero grad). ac_forward_b1: the forward at
batch 1 under torch.no_grad()."""
import torch

from torch_util import MemoryProbe, run_workload, update


class ActorCritic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                                         torch.nn.Tanh())
        self.pi = torch.nn.Linear(64, 2)
        self.v = torch.nn.Linear(64, 1)

    def forward(self, obs):
        h = self.trunk(obs)
        return self.pi(h), self.v(h).squeeze(-1)


def _forward_flops(b):
    return 2.0 * b * (4 * 64 + 64 * 64 + 64 * 2 + 64 * 1)


def _ppo(batch):
    def run(name, reps):
        mem = MemoryProbe()
        torch.manual_seed(0)
        net = ActorCritic()
        opt = torch.optim.Adam(net.parameters(), lr=3e-4)
        g = torch.Generator().manual_seed(1)
        obs = torch.randn(batch, 4, generator=g)
        actions = torch.randint(0, 2, (batch,), generator=g).unsqueeze(1)
        old_logp = torch.randn(batch, generator=g) * 0.1 - 0.7
        adv = torch.randn(batch, generator=g)
        returns = torch.randn(batch, generator=g)
        F = torch.nn.functional

        def step():
            logits, value = net(obs)
            logp_all = F.log_softmax(logits, -1)
            logp = logp_all.gather(1, actions).squeeze(1)
            ratio = torch.exp(logp - old_logp)
            surr = torch.minimum(ratio * adv, torch.clamp(ratio, 0.8, 1.2) * adv)
            entropy = (-(logp_all.exp() * logp_all).sum(-1)).mean()
            update(-surr.mean() + 0.5 * F.mse_loss(value, returns) - 0.01 * entropy, opt)

        flops = 2 * _forward_flops(batch) + 2.0 * batch * (64 * 64 + 64 * 2 + 64 * 1)
        run_workload(name, reps, step, mem, unit="steps/s", items_per_step=1, flops_per_step=flops)
    return run


def _ac_forward(name, reps):
    mem = MemoryProbe()
    torch.manual_seed(0)
    net = ActorCritic()
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(1, 4, generator=g)

    def call():
        with torch.no_grad():
            net(obs)

    run_workload(name, reps, call, mem, unit="us/call", items_per_step=1, flops_per_step=_forward_flops(1))


def benches():
    return [("ppo_update_b64", _ppo(64)), ("ac_forward_b1", _ac_forward)]
