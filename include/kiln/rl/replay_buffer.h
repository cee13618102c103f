// ReplayBuffer: the preallocated circular transition store of off-policy
// methods (SPECS R7; DQN, SAC), with seeded uniform sampling and exact
// checkpoints. Letters: C capacity, E environments, B batch, O observation
// shape, A action shape.
//
//   rl::ReplayBuffer buffer(100'000, env.spec());
//   Tensor obs = env.reset(0);
//   Tensor action = ...;                          // [E, *A]
//   rl::Transition t = env.step(action);
//   buffer.add(obs, action, t);                   // E rows; next_obs is t.final_obs
//   obs = t.obs;
//   rl::ReplayBatch batch = buffer.sample(256, gen);  // [256, ...] rows, uniform with replacement
//   buffer.checkpoint(ckpt);                      // contents, cursor and size ride in a checkpoint
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/core/generator.h"
#include "kiln/io/checkpoint.h"
#include "kiln/rl/env.h"

namespace kiln::rl {

/// B sampled transitions, each tensor new (copied rows, not views).
struct ReplayBatch {
  Tensor obs;         // [B, *O] f32: the observation the action was taken in
  Tensor action;      // [B, *A], the action space's dtype
  Tensor reward;      // [B] f32
  Tensor next_obs;    // [B, *O] f32: the observation the action led to (before any automatic reset)
  Tensor terminated;  // [B] bool: next_obs is terminal (do not bootstrap from it)
};

class ReplayBuffer {
 public:
  /// Room for `capacity` transitions of these spaces, allocated (and zeroed) now.
  ReplayBuffer(int64_t capacity, const Space& observation, const Space& action);
  ReplayBuffer(int64_t capacity, const EnvSpec& spec) : ReplayBuffer(capacity, spec.observation, spec.action) {}
  ~ReplayBuffer();
  ReplayBuffer(ReplayBuffer&&) noexcept;
  ReplayBuffer& operator=(ReplayBuffer&&) noexcept;

  /// Appends the E transitions of one vector-environment step: obs [E, *O]
  /// (the observation the actions were taken in), action [E, *A], and from
  /// `step` the reward, terminated and final_obs (stored as next_obs, so a
  /// truncated episode keeps its last observation to bootstrap from). Once
  /// full, the oldest rows are overwritten. Shapes and dtypes are checked
  /// before anything is written.
  void add(const Tensor& obs, const Tensor& action, const Transition& step);
  /// `batch_size` rows drawn uniformly, with replacement, from the size()
  /// stored ones: one randint from `gen`, then only those rows are copied.
  ReplayBatch sample(int64_t batch_size, Generator& gen) const;

  int64_t size() const { return size_; }
  int64_t capacity() const { return capacity_; }
  /// Empties the buffer (the storage is kept and zeroed).
  void clear();

  /// Registers the buffer with a checkpoint: its contents as tensors
  /// "<name>.obs", "<name>.action", "<name>.reward", "<name>.next_obs",
  /// "<name>.terminated" ([C, ...] each) and its cursor and size as state
  /// "<name>". A load checks the shapes and dtypes (capacity and spaces must
  /// match) and the counters before it changes anything. The checkpoint
  /// refers to this buffer: keep it in place (do not move it) while registered.
  void checkpoint(io::Checkpoint& ckpt, const std::string& name = "replay");
  /// The counters alone (capacity, cursor, size), the state checkpoint()
  /// registers beside the contents. load_state checks them all first.
  io::State state() const;
  void load_state(const io::State& state);

 private:
  int64_t capacity_;
  Space observation_, action_space_;
  std::unique_ptr<nn::Module> storage_;  // the five [C, ...] tensors, as buffers (what a checkpoint saves)
  Tensor obs_, action_, reward_, next_obs_, terminated_;
  int64_t cursor_ = 0;  // the row the next transition goes to
  int64_t size_ = 0;    // rows holding transitions: min(added, C)
};

}  // namespace kiln::rl
