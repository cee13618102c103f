"""PyTorch's side of bench/rl_env_bench.cpp: raw vectorised CartPole
stepping in NumPy (bench/np_cartpole.py, what a PyTorch RL script steps),
one call one step of E copies with automatic resets, actions drawn before
timing (64 batches used in turn). Throughput in environment steps/s."""
import numpy as np

from np_cartpole import CartPoleVec
from torch_util import emit, seconds_per_call


def _cartpole_step(num_envs):
    def run(name, reps):
        env = CartPoleVec(num_envs)
        env.reset(seed=0)
        rng = np.random.default_rng(1)
        actions = [rng.integers(0, 2, size=num_envs) for _ in range(64)]
        state = {"next": 0}

        def step():
            env.step(actions[state["next"]])
            state["next"] = (state["next"] + 1) % len(actions)

        emit(name, "throughput", "steps/s", num_envs / seconds_per_call(step, reps, 0.3))

    return run


def benches():
    return [("cartpole_step_e4096", _cartpole_step(4096)), ("cartpole_step_e8", _cartpole_step(8))]
