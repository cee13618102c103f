"""Goldens for kiln/rl/cartpole.h and kiln/rl/pendulum.h: trajectories of
Gymnasium's CartPole-v1 and Pendulum-v1 from fixed start states under fixed
action sequences, restated here in plain Python floats (f64), operation by
operation:

- CartPole: gymnasium/envs/classic_control/cartpole.py, CartPoleEnv.step with
  kinematics_integrator "euler" (the default), under
  gymnasium/wrappers/time_limit.py's TimeLimit(max_episode_steps=500), as
  gymnasium.make("CartPole-v1") builds it.
- Pendulum: gymnasium/envs/classic_control/pendulum.py, PendulumEnv.step and
  _get_obs, under TimeLimit(200) (gymnasium.make("Pendulum-v1")). The action
  is the f32 array Gymnasium clips with np.clip; with NumPy 1.x (Debian 12's
  1.24) every operation after the clip is f64, as here.

math.sin and math.cos are glibc's, as kiln's std::sin and std::cos are (np.sin
may use a SIMD library that differs in the last bit). Gymnasium's x**2 (of a
Python float or an np.float64 scalar) is glibc's pow(x, 2.0), which is not
always the rounded x * x (1 in ~1500 here): kiln calls pow too. The CartPole
case "pow_matters" starts where the step with x * x would differ, so a
compiler that folded pow into a multiply fails the tests. (Pendulum's
squares reach only the reward, where the f32 cast hides such a difference; its
f32 action's u**2 is exact in f64.)

Each case: "start" (the f64 state set before the first step), "actions", per
step "states" (the f64 state the step reached, before any reset) and, for
Pendulum, the f32 observations "obs" and rewards "reward" (CartPole's
observation is the f32 cast of its state and its reward 1); "terminated" and
"truncated" are the flags of the last step (every earlier step has neither);
CartPole's "pow_matters" counts the steps that x * x would change. Cases of one
environment are stepped together as one batch (one copy each) in
tests/rl/cartpole_test.cpp and pendulum_test.cpp.
"""
import math
import random
import struct

from . import common


def f32(v):
    """The f32 nearest v (np.float32(v)), as a Python float."""
    return struct.unpack("f", struct.pack("f", v))[0]


def square(v):
    """v**2 as Gymnasium writes it (glibc's pow)."""
    return v**2


def multiply_square(v):
    """What a compiler that folds pow(v, 2.0) computes."""
    return v * v


# ---- CartPole-v1 ----

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
CARTPOLE_STEPS = 500


def cartpole_step(state, action, square=square):
    """CartPoleEnv.step: the next state and whether it is terminal."""
    x, x_dot, theta, theta_dot = state
    force = FORCE_MAG if action == 1 else -FORCE_MAG
    costheta = math.cos(theta)
    sintheta = math.sin(theta)
    temp = (force + POLEMASS_LENGTH * square(theta_dot) * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * square(costheta) / TOTAL_MASS))
    xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    x = x + TAU * x_dot
    x_dot = x_dot + TAU * xacc
    theta = theta + TAU * theta_dot
    theta_dot = theta_dot + TAU * thetaacc
    terminated = x < -X_THRESHOLD or x > X_THRESHOLD or theta < -THETA_THRESHOLD or theta > THETA_THRESHOLD
    return (x, x_dot, theta, theta_dot), terminated


def cartpole_episode(name, start, policy, steps=CARTPOLE_STEPS):
    """Runs an episode from `start` under policy(t, state) -> action until it
    terminates, TimeLimit truncates it (elapsed >= 500) or `steps` ran."""
    state, actions, states, term, trunc, pow_matters = tuple(start), [], [], False, False, 0
    for t in range(steps):
        a = policy(t, state)
        pow_matters += cartpole_step(state, a, multiply_square) != cartpole_step(state, a)
        state, term = cartpole_step(state, a)
        trunc = t + 1 >= CARTPOLE_STEPS
        actions.append(a)
        states.append(list(state))
        if term or trunc:
            break
    return {"name": name, "start": list(start), "actions": actions, "states": states, "terminated": term,
            "truncated": trunc, "pow_matters": pow_matters}


def pow_matters_start():
    """The first (theta, theta_dot) on a grid (theta_dot in steps of 1e-5,
    theta of 1e-3) whose first step (action 1) x * x would change."""
    for k in range(1, 10**6):
        theta_dot = k * 1e-5
        if theta_dot**2 == theta_dot * theta_dot:
            continue
        for j in range(1, 200):
            state = (0.0, 0.0, j * 1e-3, theta_dot)
            if cartpole_step(state, 1) != cartpole_step(state, 1, multiply_square):
                return state
    raise AssertionError("no start where pow(v, 2) and v * v differ in a step")


def balance(t, s):
    """Pushes toward the side the pole leans to (a PD rule on theta)."""
    return 1 if s[2] + 0.5 * s[3] > 0 else 0


def keep_centred(t, s):
    """Balances the pole and keeps the cart near x = 0 for 500 steps."""
    return 1 if 0.5 * s[0] + 1.0 * s[1] + 20 * s[2] + 2 * s[3] > 0 else 0


def balance_then_push(k, d):
    """keep_centred until step k, then d pushes left, then pushes right."""
    return lambda t, s: keep_centred(t, s) if t < k else (0 if t < k + d else 1)


def cartpole_cases():
    start = (0.01, -0.02, 0.03, 0.01)
    cases = [
        cartpole_episode("theta_left", (0.01, 0.0, 0.0, 0.0), lambda t, s: 1),
        cartpole_episode("theta_right", (0.01, 0.0, 0.0, 0.0), lambda t, s: 0),
        cartpole_episode("x_right", (0.0, 1.0, 0.0, 0.0), balance),
        cartpole_episode("x_left", (0.0, -1.0, 0.0, 0.0), balance),
        cartpole_episode("truncated", start, keep_centred),
    ]
    # Balance, then push so that the pole falls at exactly the 500th step:
    # terminated and truncated together (the first (k, d) that does).
    found = next(case for k in range(480, CARTPOLE_STEPS) for d in range(4)
                 for case in [cartpole_episode("terminated_and_truncated", start, balance_then_push(k, d))]
                 if case["terminated"] and case["truncated"])
    cases.append(found)
    # What ended each episode, checked: the names say it.
    last = {c["name"]: c["states"][-1] for c in cases}
    assert last["theta_left"][2] < -THETA_THRESHOLD and abs(last["theta_left"][0]) <= X_THRESHOLD
    assert last["theta_right"][2] > THETA_THRESHOLD and abs(last["theta_right"][0]) <= X_THRESHOLD
    assert last["x_right"][0] > X_THRESHOLD and abs(last["x_right"][2]) <= THETA_THRESHOLD
    assert last["x_left"][0] < -X_THRESHOLD and abs(last["x_left"][2]) <= THETA_THRESHOLD
    # A start where the step with v * v instead of pow(v, 2) differs.
    cases.append(cartpole_episode("pow_matters", pow_matters_start(), lambda t, s: 1, steps=10))
    assert cases[-1]["pow_matters"] > 0
    by_name = {c["name"]: c for c in cases}
    assert by_name["truncated"]["truncated"] and not by_name["truncated"]["terminated"]
    assert len(by_name["terminated_and_truncated"]["actions"]) == CARTPOLE_STEPS
    return cases


# ---- Pendulum-v1 ----

MAX_SPEED = 8
MAX_TORQUE = 2.0
DT = 0.05
G = 10.0
M = 1.0
L = 1.0
PENDULUM_STEPS = 200


def angle_normalize(x):
    return ((x + math.pi) % (2 * math.pi)) - math.pi


def clip(v, lo, hi):
    """np.clip: max(v, lo) then min(., hi), a float."""
    return float(min(max(v, lo), hi))


def pendulum_step(state, action):
    """PendulumEnv.step for the f32 torque `action`: (next state, reward)."""
    th, thdot = state
    u = clip(action, -MAX_TORQUE, MAX_TORQUE)  # the bounds are f32 values: u stays an f32 value
    costs = square(angle_normalize(th)) + 0.1 * square(thdot) + 0.001 * square(u)
    newthdot = thdot + (3 * G / (2 * L) * math.sin(th) + 3.0 / (M * square(L)) * u) * DT
    newthdot = clip(newthdot, -MAX_SPEED, MAX_SPEED)
    newth = th + newthdot * DT
    return (newth, newthdot), -costs


def pendulum_obs(state):
    th, thdot = state
    return [f32(math.cos(th)), f32(math.sin(th)), f32(thdot)]


def pendulum_episode(name, start, actions):
    state, states, obs, rewards = tuple(start), [], [], []
    for a in actions:
        state, r = pendulum_step(state, a)
        states.append(list(state))
        obs.append(pendulum_obs(state))
        rewards.append(f32(r))
    assert len(actions) <= PENDULUM_STEPS
    return {"name": name, "start": list(start), "actions": actions, "states": states, "obs": obs, "reward": rewards,
            "terminated": False, "truncated": len(actions) == PENDULUM_STEPS}


def pendulum_cases():
    # Torques in [-3, 3): a third of them outside [-2, 2] and clipped.
    rng = random.Random(7)
    noisy = [f32(rng.random() * 6 - 3) for _ in range(PENDULUM_STEPS)]
    cases = [
        pendulum_episode("random_torques", (2.5, -0.7), noisy),
        # Full torque in the direction of motion: it spins up to max_speed (the
        # clip), and theta leaves [-pi, pi] (angle_normalize wraps it).
        pendulum_episode("spin_up", (0.3, 6.0), [2.0] * PENDULUM_STEPS),
        pendulum_episode("spin_down", (-3.0, -1.0), [-2.5] * 120 + [f32(0.3)] * 80),
        pendulum_episode("short", (0.2, 0.0), [f32(0.1 * k) for k in range(-10, 11)]),
    ]
    by_name = {c["name"]: c for c in cases}
    assert any(abs(s[1]) == MAX_SPEED for s in by_name["spin_up"]["states"])
    assert any(s[0] > math.pi for s in by_name["spin_up"]["states"])
    assert any(s[0] < -math.pi for s in by_name["spin_down"]["states"])
    assert any(abs(a) > MAX_TORQUE for a in by_name["random_torques"]["actions"])
    return cases


def generate():
    common.dump("rl_envs", {"cartpole": cartpole_cases(), "pendulum": pendulum_cases()})
