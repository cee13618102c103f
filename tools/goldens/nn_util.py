"""Parity cases for nn layers: a PyTorch module, its state_dict, inputs, outputs
and every gradient, for tests/nn/parity.h.

A case runs `forward(module, *inputs)` (default: module(*inputs)), flattens the
outputs (tensors, tuples, nested tuples) into a list, draws a random cotangent
for every floating output, backpropagates sum(output * cotangent) and records
the gradient of every floating input and every parameter (by state_dict key).
"""
import torch

from goldens import common


def flatten(out):
    if isinstance(out, torch.Tensor):
        return [out]
    items = []
    for o in out:
        items += flatten(o)
    return items


def parity_case(name, module, inputs, forward=None, seed=1000, **extra):
    """One case as JSON. `inputs`: tensors (floating ones get gradients)."""
    inputs = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
    module.zero_grad(set_to_none=True)
    out = flatten(forward(module, *inputs) if forward else module(*inputs))
    g = common.gen(seed)
    cotangents = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype)
                  if o.is_floating_point() else None for o in out]
    loss = sum((o * c).sum() for o, c in zip(out, cotangents) if c is not None and o.requires_grad)
    if isinstance(loss, torch.Tensor):
        loss.backward()
    params = dict(module.named_parameters())
    return {
        "name": name,
        **extra,
        "state": {k: common.t(v) for k, v in module.state_dict().items()},
        "inputs": [common.t(x) for x in inputs],
        "outputs": [common.t(o) for o in out],
        "cotangents": [common.t(c) if c is not None else None for c in cotangents],
        "input_grads": [common.t(x.grad) if x.grad is not None else None for x in inputs],
        "param_grads": {k: common.t(p.grad) for k, p in params.items() if p.grad is not None},
    }
