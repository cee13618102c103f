"""CartPole-v1 for E copies at once in NumPy: Gymnasium's dynamics
(classic_control/cartpole.py, Euler, TimeLimit(500)) written over arrays,
with the same-step automatic reset of kiln's rl::CartPole. PyTorch's side of
the CartPole benchmarks (bench/torch_rl_env.py, the PPO scripts) uses it.

    env = CartPoleVec(8)
    obs = env.reset(seed=0)                                    # [8, 4] float32
    obs, reward, terminated, truncated, final_obs = env.step(actions)  # actions [8] ints in {0, 1}

Where an episode ended in a step, obs already starts the next episode and
final_obs holds the observation it ended in (elsewhere final_obs == obs).
The state is float64; NumPy's SIMD sin/cos and its x**2 (x * x) may differ
from Python's math in the last bit, so this is Gymnasium's CartPole to
rounding, not bit for bit as kiln's is. Resets draw from one
numpy.random.Generator(PCG64(seed)).
"""
import math

import numpy as np

GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
MAX_EPISODE_STEPS = 500


class CartPoleVec:
    def __init__(self, num_envs):
        self.num_envs = num_envs
        self.state = np.zeros((4, num_envs))  # rows x, x_dot, theta, theta_dot
        self.elapsed = np.zeros(num_envs, dtype=np.int64)
        self.rng = None

    def reset(self, seed):
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.state = self.rng.uniform(-0.05, 0.05, size=(4, self.num_envs))
        self.elapsed[:] = 0
        return self.state.T.astype(np.float32)

    def step(self, actions):
        """actions [E] ints in {0, 1} -> obs [E, 4] float32, reward [E] float32,
        terminated [E] bool, truncated [E] bool, final_obs [E, 4] float32."""
        assert self.rng is not None, "call reset(seed) before step"
        actions = np.asarray(actions)
        assert actions.shape == (self.num_envs,) and np.all((actions == 0) | (actions == 1)), actions
        x, x_dot, theta, theta_dot = self.state
        force = np.where(actions == 1, FORCE_MAG, -FORCE_MAG)
        costheta = np.cos(theta)
        sintheta = np.sin(theta)
        temp = (force + POLEMASS_LENGTH * theta_dot**2 * sintheta) / TOTAL_MASS
        thetaacc = (GRAVITY * sintheta - costheta * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * costheta**2 / TOTAL_MASS))
        xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
        self.state = np.stack((x + TAU * x_dot, x_dot + TAU * xacc, theta + TAU * theta_dot, theta_dot + TAU * thetaacc))
        x, theta = self.state[0], self.state[2]
        terminated = (x < -X_THRESHOLD) | (x > X_THRESHOLD) | (theta < -THETA_THRESHOLD) | (theta > THETA_THRESHOLD)
        self.elapsed += 1
        truncated = self.elapsed >= MAX_EPISODE_STEPS
        final_obs = self.state.T.astype(np.float32)
        done = terminated | truncated
        if done.any():
            self.state[:, done] = self.rng.uniform(-0.05, 0.05, size=(4, int(done.sum())))
            self.elapsed[done] = 0
            obs = self.state.T.astype(np.float32)
        else:
            obs = final_obs.copy()
        reward = np.ones(self.num_envs, dtype=np.float32)
        return obs, reward, terminated, truncated, final_obs
