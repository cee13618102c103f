// The environment contract of kiln::rl (SPECS R1, spec 002 "environment
// schema"): spaces, the schema of one environment, and the vector-environment
// interface that steps E copies at once with automatic reset. Letters: E
// environments, O observation shape, A action shape.
//
//   rl::CartPole env(8);                          // E = 8 copies
//   Tensor obs = env.reset(/*seed=*/0);           // [8, 4] f32
//   rl::Transition t = env.step(actions);         // actions [8] i64 in {0, 1}
//   // t.obs is the next observation; where t.done() the episode ended and
//   // t.obs already starts the next one (t.final_obs holds the last one).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/generator.h"
#include "kiln/core/shape.h"
#include "kiln/core/tensor.h"

namespace kiln::rl {

/// Spec 002's structural domains. Shapes exclude the environment axis; rank 0
/// is one scalar per environment.
enum class SpaceKind { Box, Discrete, Binary };

/// One observation or action space (a value, not a class hierarchy).
///   Box:      f32 values of `shape` in [low, high] (per element; +-inf when unbounded)
///   Discrete: one i64 in [0, n) per environment (shape {})
///   Binary:   bool values of `shape`
struct Space {
  SpaceKind kind = SpaceKind::Box;
  Shape shape;
  DType dtype = kF32;        // kF32 (Box), kI64 (Discrete), kBool (Binary)
  int64_t n = 0;             // Discrete only
  std::vector<double> low;   // Box only: numel(shape) bounds
  std::vector<double> high;

  static Space box(const Shape& shape, std::vector<double> low, std::vector<double> high);
  static Space discrete(int64_t n);
  static Space binary(const Shape& shape);

  int64_t numel() const;
  /// True when `x` is [E, *shape] of this space's dtype for some E.
  bool batch_matches(const Tensor& x) const;
  /// "Box([4], f32)", "Discrete(2)", "Binary([3])"
  std::string to_string() const;
};

/// One single-agent environment's schema.
struct EnvSpec {
  std::string name;               // "CartPole-v1"
  Space observation;
  Space action;
  int64_t max_episode_steps = 0;  // truncation horizon (0: none)
  double reward_threshold = 0;    // the return that counts as solved (CartPole-v1: 475; NaN: none, as Pendulum-v1)
};

/// One vector-environment step. Every tensor is new (not a view of the
/// environment's state) and has E rows.
struct Transition {
  Tensor obs;         // [E, *O] f32: the next observation; after an automatic reset, the new episode's first
  Tensor reward;      // [E] f32
  Tensor terminated;  // [E] bool: the episode reached a terminal state (do not bootstrap)
  Tensor truncated;   // [E] bool: the episode hit the time limit, not terminal (bootstrap from final_obs)
  Tensor final_obs;   // [E, *O] f32: the observation the episode ended in where done, else equal to obs
  // Both flags are true where the time limit falls on a terminal step (as
  // Gymnasium's TimeLimit reports it): terminated wins, do not bootstrap.

  /// terminated | truncated, [E] bool.
  Tensor done() const;
};

/// E copies of one environment, stepped together. An episode that ends in a
/// step is reset inside that step (same-step automatic reset): the returned
/// obs starts the new episode and final_obs keeps the one it ended in.
class VectorEnv {
 public:
  virtual ~VectorEnv() = default;

  virtual const EnvSpec& spec() const = 0;
  virtual int64_t num_envs() const = 0;

  /// Resets every copy; copy i draws from a stream derived from (seed, i), so
  /// the same seed gives the same episodes for any E >= i + 1. Returns [E, *O].
  virtual Tensor reset(uint64_t seed) = 0;
  /// actions [E, *A] in the action space (Discrete: [E] i64). Before reset(),
  /// with the wrong shape or dtype, or with an action the environment refuses
  /// (outside a Discrete space, NaN): kiln::Error naming the env, the argument
  /// and the shapes, and no copy changes state. A Box action outside its
  /// bounds is clipped where the reference environment clips it (Pendulum).
  virtual Transition step(const Tensor& actions) = 0;
};

/// The random stream of copy `index` of a vector environment reset with
/// `seed` (one Philox block keyed by the seed): independent across copies and
/// seeds, and the same for any number of copies. A copy's automatic resets
/// keep drawing from it.
Generator env_generator(uint64_t seed, int64_t index);

}  // namespace kiln::rl
