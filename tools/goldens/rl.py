"""Goldens for tests/rl (kiln/rl/distributions.h, kiln/rl/rollout.h).

rl_distributions.json: torch.distributions.Categorical(logits=...) (probs,
log_prob, entropy, mode, and the gradient of sum(w1 * log_prob) + sum(w2 *
entropy) in the logits), and the tanh-squashed Gaussian three ways: Normal +
TanhTransform's log|det J| + log(scale) (the stable form), a
TransformedDistribution(Normal, [TanhTransform, AffineTransform]) evaluated
through its cache at the squashed action, and CleanRL's SAC formula
log N - log(scale (1 - tanh^2) + 1e-6); plus the squashed mean, the base
Gaussian's entropy, and the gradients of sum(w * log_prob) in mean and log_std.

rl_ppo.json: CleanRL's PPO minibatch loss (ppo.py's update, copied below
line for line) for a categorical policy (clip_vloss on and off) and for a
tanh-squashed Gaussian (the log-prob above; ent_coef 0 and 0.01, norm_adv
off): the loss, its parts, approx_kl, clipfrac, and the loss's gradients in
the distribution parameters and the new values.

rl_gae.json: advantages and returns of a [T, E] rollout with terminations,
truncations (bootstrapped from V(final_obs)) and neither, computed in plain
Python from the definitions, not by the backward recursion kiln uses:
advantage_t = sum_l (gamma lambda)^l delta_{t+l} up to the episode's end, and
return_t as the lambda-return recursion G_t = r_t + gamma ((1 - lambda) V' + lambda G_{t+1}).
"""
import math

import torch
from torch.distributions import Categorical, Normal, TransformedDistribution
from torch.distributions.transforms import AffineTransform, TanhTransform

from . import common


def _categorical():
    logits = common.randn(5, 4, seed=11) * 2.0
    actions = torch.tensor([0, 3, 1, 2, 3])
    w1 = common.randn(5, seed=12)
    w2 = common.randn(5, seed=13)
    x = logits.clone().requires_grad_(True)
    d = Categorical(logits=x)
    lp = d.log_prob(actions)
    ent = d.entropy()
    ((w1 * lp).sum() + (w2 * ent).sum()).backward()
    # A row with an impossible category (-inf): forward only.
    masked = torch.tensor([[0.5, -math.inf, 1.0, -2.0], [3.0, 3.0, -math.inf, 0.0]], dtype=torch.float64)
    dm = Categorical(logits=masked)
    am = torch.tensor([2, 1])
    return {
        "logits": common.t(logits), "actions": common.t(actions), "w1": common.t(w1), "w2": common.t(w2),
        "norm_logits": common.t(d.logits), "probs": common.t(d.probs), "log_prob": common.t(lp),
        "entropy": common.t(ent), "mode": common.t(d.probs.argmax(-1)), "grad_logits": common.t(x.grad),
        "masked_logits": common.t(masked), "masked_actions": common.t(am),
        "masked_log_prob": common.t(dm.log_prob(am)), "masked_entropy": common.t(dm.entropy()),
    }


def _tanh_gaussian(shared_log_std):
    low = torch.tensor([-2.0, -1.0, 0.0], dtype=torch.float64)
    high = torch.tensor([2.0, 3.0, 0.5], dtype=torch.float64)
    loc, scale = (high + low) / 2, (high - low) / 2
    mean = common.randn(4, 3, seed=21)
    log_std = common.randn(3, seed=22) * 0.5 if shared_log_std else common.randn(4, 3, seed=23) * 0.5
    raw = common.randn(4, 3, seed=24) * 1.5
    raw[3, 0] = 8.0  # tanh rounds to 1 in f32: the stable form stays finite
    w = common.randn(4, seed=25)
    m = mean.clone().requires_grad_(True)
    s = log_std.clone().requires_grad_(True)
    base = Normal(m, s.exp())
    tanh = TanhTransform()
    lp = (base.log_prob(raw) - tanh.log_abs_det_jacobian(raw, torch.tanh(raw)) - scale.log()).sum(-1)
    (w * lp).sum().backward()
    with torch.no_grad():
        t1, a1 = TanhTransform(cache_size=1), AffineTransform(loc, scale, cache_size=1)
        dist = TransformedDistribution(Normal(mean, log_std.exp()), [t1, a1])
        action = a1(t1(raw))
        transformed = dist.log_prob(action).sum(-1)
        sac = (Normal(mean, log_std.exp()).log_prob(raw) - torch.log(scale * (1 - torch.tanh(raw) ** 2) + 1e-6)).sum(-1)
        mode = loc + scale * torch.tanh(mean)
        entropy = Normal(mean, log_std.exp().expand(4, 3)).entropy().sum(-1)
    return {
        "low": common.t(low), "high": common.t(high), "mean": common.t(mean), "log_std": common.t(log_std),
        "raw": common.t(raw), "w": common.t(w), "action": common.t(action), "log_prob": common.t(lp),
        "transformed_log_prob": common.t(transformed), "sac_log_prob": common.t(sac), "mode": common.t(mode),
        "entropy": common.t(entropy), "grad_mean": common.t(m.grad), "grad_log_std": common.t(s.grad),
    }


def _cleanrl_loss(newlogprob, entropy, newvalue, b, args):
    """ppo.py's update body for one minibatch (mb_inds = all rows)."""
    logratio = newlogprob - b["logprobs"]
    ratio = logratio.exp()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > args["clip_coef"]).float().mean().item()
    mb_advantages = b["advantages"]
    if args["norm_adv"]:
        mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
    pg_loss1 = -mb_advantages * ratio
    pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args["clip_coef"], 1 + args["clip_coef"])
    pg_loss = torch.max(pg_loss1, pg_loss2).mean()
    newvalue = newvalue.view(-1)
    if args["clip_vloss"]:
        v_loss_unclipped = (newvalue - b["returns"]) ** 2
        v_clipped = b["values"] + torch.clamp(newvalue - b["values"], -args["clip_coef"], args["clip_coef"])
        v_loss_clipped = (v_clipped - b["returns"]) ** 2
        v_loss_max = torch.max(v_loss_unclipped, v_loss_clipped)
        v_loss = 0.5 * v_loss_max.mean()
    else:
        v_loss = 0.5 * ((newvalue - b["returns"]) ** 2).mean()
    entropy_loss = entropy.mean()
    loss = pg_loss - args["ent_coef"] * entropy_loss + v_loss * args["vf_coef"]
    return {"loss": loss, "policy_loss": pg_loss, "value_loss": v_loss, "entropy": entropy_loss,
            "approx_kl": approx_kl.item(), "clipfrac": clipfrac}


def _ppo_case(name, kind, args, seed):
    M = 8
    g = common.gen(seed)
    values = torch.randn(M, generator=g, dtype=torch.float64)
    b = {"values": values + torch.randn(M, generator=g, dtype=torch.float64) * 0.3,
         "returns": torch.randn(M, generator=g, dtype=torch.float64),
         "advantages": torch.randn(M, generator=g, dtype=torch.float64) * 2}
    v = values.clone().requires_grad_(True)
    case = {"name": name, "kind": kind, "args": args}
    if kind == "categorical":
        logits = torch.randn(M, 3, generator=g, dtype=torch.float64)
        actions = torch.randint(0, 3, (M,), generator=g)
        x = logits.clone().requires_grad_(True)
        d = Categorical(logits=x)
        newlogprob, entropy = d.log_prob(actions), d.entropy()
        b["logprobs"] = newlogprob.detach() + torch.randn(M, generator=g, dtype=torch.float64) * 0.3
        case.update(logits=common.t(logits), actions=common.t(actions))
        leaves = {"logits": x}
    else:
        low = torch.tensor([-2.0, -1.0], dtype=torch.float64)
        high = torch.tensor([2.0, 3.0], dtype=torch.float64)
        scale = (high - low) / 2
        mean = torch.randn(M, 2, generator=g, dtype=torch.float64)
        log_std = torch.randn(2, generator=g, dtype=torch.float64) * 0.3
        raw = mean + torch.randn(M, 2, generator=g, dtype=torch.float64)
        m, s = mean.clone().requires_grad_(True), log_std.clone().requires_grad_(True)
        base = Normal(m, s.exp())
        newlogprob = (base.log_prob(raw) - TanhTransform().log_abs_det_jacobian(raw, torch.tanh(raw))
                      - scale.log()).sum(-1)
        entropy = base.entropy().sum(-1)
        b["logprobs"] = newlogprob.detach() + torch.randn(M, generator=g, dtype=torch.float64) * 0.3
        case.update(low=common.t(low), high=common.t(high), mean=common.t(mean), log_std=common.t(log_std),
                    raw=common.t(raw))
        leaves = {"mean": m, "log_std": s}
    out = _cleanrl_loss(newlogprob, entropy, v, b, args)
    out["loss"].backward()
    case.update({k: common.t(t) for k, t in b.items()})
    case["new_values"] = common.t(values)
    case["out"] = {k: (common.t(t) if torch.is_tensor(t) else t) for k, t in out.items()}
    case["grads"] = {k: common.t(t.grad) for k, t in dict(leaves, new_values=v).items()}
    return case


def _ppo():
    base = {"clip_coef": 0.2, "norm_adv": True, "clip_vloss": True, "ent_coef": 0.01, "vf_coef": 0.5}
    return {"cases": [
        _ppo_case("categorical_clip_vloss", "categorical", base, 41),
        _ppo_case("categorical_plain_vloss", "categorical", dict(base, clip_vloss=False, clip_coef=0.1), 42),
        _ppo_case("gaussian_no_entropy", "gaussian", dict(base, ent_coef=0.0), 43),
        _ppo_case("gaussian_raw_adv", "gaussian", dict(base, norm_adv=False, vf_coef=1.0), 44),
    ]}


def _gae():
    T, E = 6, 3
    gamma, lam = 0.97, 0.9
    g = common.gen(31)
    rewards = torch.randn(T, E, generator=g, dtype=torch.float64).tolist()
    values = torch.randn(T, E, generator=g, dtype=torch.float64).tolist()
    final_values = torch.randn(T, E, generator=g, dtype=torch.float64).tolist()
    last_values = torch.randn(E, generator=g, dtype=torch.float64).tolist()
    # env 0: terminated at t=2 and at the last step; env 1: truncated at t=1,
    # terminated at t=3 and truncated at t=4 (consecutive ends); env 2: no end.
    term = [[False] * E for _ in range(T)]
    trunc = [[False] * E for _ in range(T)]
    term[2][0] = term[5][0] = True
    trunc[1][1] = term[3][1] = trunc[4][1] = True
    for t in range(T):
        for e in range(E):
            if not trunc[t][e]:
                final_values[t][e] = 0.0  # only read where truncated

    def next_value(t, e):
        if term[t][e]:
            return 0.0
        if trunc[t][e]:
            return final_values[t][e]
        return last_values[e] if t == T - 1 else values[t + 1][e]

    def delta(t, e):
        return rewards[t][e] + gamma * next_value(t, e) - values[t][e]

    adv = [[0.0] * E for _ in range(T)]
    ret = [[0.0] * E for _ in range(T)]
    for e in range(E):
        for t in range(T):  # the explicit sum up to the episode's end (or the rollout's)
            total, k = 0.0, t
            while True:
                total += (gamma * lam) ** (k - t) * delta(k, e)
                if term[k][e] or trunc[k][e] or k == T - 1:
                    break
                k += 1
            adv[t][e] = total
        G = None
        for t in reversed(range(T)):  # lambda-returns
            ended = term[t][e] or trunc[t][e] or t == T - 1
            nv = next_value(t, e)
            G = rewards[t][e] + gamma * (nv if ended else (1 - lam) * nv + lam * G)
            ret[t][e] = G
    f64 = torch.float64
    return {
        "gamma": gamma, "lambda": lam,
        "rewards": common.t(torch.tensor(rewards, dtype=f64)), "values": common.t(torch.tensor(values, dtype=f64)),
        "final_values": common.t(torch.tensor(final_values, dtype=f64)),
        "last_values": common.t(torch.tensor(last_values, dtype=f64)),
        "terminated": common.t(torch.tensor(term)), "truncated": common.t(torch.tensor(trunc)),
        "advantages": common.t(torch.tensor(adv, dtype=f64)), "returns": common.t(torch.tensor(ret, dtype=f64)),
    }


def generate():
    common.dump("rl_distributions", {"categorical": _categorical(), "tanh_gaussian": _tanh_gaussian(False),
                                     "tanh_gaussian_shared": _tanh_gaussian(True)})
    common.dump("rl_gae", _gae())
    common.dump("rl_ppo", _ppo())
