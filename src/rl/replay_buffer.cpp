// ReplayBuffer: five preallocated [C, ...] tensors written as a ring, sampled
// with one randint and index_select (only the drawn rows are copied).
#include "kiln/rl/replay_buffer.h"

#include <fmt/format.h>

#include <cstring>

#include "kiln/core/error.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/index.h"
#include "kiln/ops/random.h"

namespace kiln::rl {

namespace {

/// The storage as a module of buffers, so that a checkpoint saves and
/// validates it like any state dict; errors name it "ReplayBuffer".
class ReplayStorage final : public nn::Module {
 public:
  std::string type_name() const override { return "ReplayBuffer"; }
};

/// [n, *shape]
Shape rows(int64_t n, const Shape& shape) {
  Shape out{n};
  for (int64_t d : shape) out.push_back(d);
  return out;
}

/// Writes rows [from, E) of `src` ([E, ...], contiguous) to the ring `dst`
/// ([C, ...]) starting at row `at`, wrapping at C.
void write_ring(const Tensor& dst, const Tensor& src, int64_t from, int64_t at) {
  const int64_t capacity = dst.size(0), n = src.size(0) - from;
  const size_t row = size_t(dst.nbytes() / capacity);
  auto* d = static_cast<std::byte*>(dst.data_ptr());
  const auto* s = static_cast<const std::byte*>(src.data_ptr()) + size_t(from) * row;
  const int64_t first = std::min(n, capacity - at);
  std::memcpy(d + size_t(at) * row, s, size_t(first) * row);
  std::memcpy(d, s + size_t(first) * row, size_t(n - first) * row);
}

}  // namespace

ReplayBuffer::ReplayBuffer(int64_t capacity, const Space& observation, const Space& action)
    : capacity_(capacity),
      observation_(observation),
      action_space_(action),
      storage_(std::make_unique<ReplayStorage>()) {
  KILN_CHECK(capacity > 0, "ReplayBuffer", "capacity must be positive, got {}", capacity);
  KILN_CHECK(observation.dtype == kF32, "ReplayBuffer", "observation space {} is not f32: observations are f32",
             observation.to_string());
  obs_ = storage_->register_buffer("obs", zeros(rows(capacity, observation.shape)));
  action_ = storage_->register_buffer("action", zeros(rows(capacity, action.shape), {.dtype = action.dtype}));
  reward_ = storage_->register_buffer("reward", zeros({capacity}));
  next_obs_ = storage_->register_buffer("next_obs", zeros(rows(capacity, observation.shape)));
  terminated_ = storage_->register_buffer("terminated", zeros({capacity}, {.dtype = kBool}));
}

ReplayBuffer::~ReplayBuffer() = default;
ReplayBuffer::ReplayBuffer(ReplayBuffer&&) noexcept = default;
ReplayBuffer& ReplayBuffer::operator=(ReplayBuffer&&) noexcept = default;

void ReplayBuffer::add(const Tensor& obs, const Tensor& action, const Transition& step) {
  constexpr const char* op = "ReplayBuffer.add";
  KILN_CHECK(observation_.batch_matches(obs), op,
             "obs {} does not match the observation space {}: expected rows of {} f32", describe(obs),
             observation_.to_string(), kiln::to_string(observation_.shape));
  const int64_t e = obs.size(0);
  const std::string expected_obs = fmt::format("{} f32", kiln::to_string(rows(e, observation_.shape)));
  KILN_CHECK(action_space_.batch_matches(action) && action.size(0) == e, op,
             "action {} does not match the action space {} for obs {}: expected {} {}", describe(action),
             action_space_.to_string(), describe(obs), kiln::to_string(rows(e, action_space_.shape)),
             name(action_space_.dtype));
  auto vector_of = [&](const Tensor& t, DType dtype) {
    return t.defined() && t.dtype() == dtype && t.shape() == Shape{e};
  };
  KILN_CHECK(vector_of(step.reward, kF32), op, "step.reward {} must be [{}] f32 (one per row of obs {})",
             describe(step.reward), e, describe(obs));
  KILN_CHECK(vector_of(step.terminated, kBool), op, "step.terminated {} must be [{}] bool (one per row of obs {})",
             describe(step.terminated), e, describe(obs));
  KILN_CHECK(observation_.batch_matches(step.final_obs) && step.final_obs.size(0) == e, op,
             "step.final_obs {} must be {} like obs", describe(step.final_obs), expected_obs);

  // With more rows than room, only the last C survive (as if added one by one).
  const int64_t from = std::max<int64_t>(0, e - capacity_);
  const int64_t at = (cursor_ + from) % capacity_;
  write_ring(obs_, obs.contiguous(), from, at);
  write_ring(action_, action.contiguous(), from, at);
  write_ring(reward_, step.reward.contiguous(), from, at);
  write_ring(next_obs_, step.final_obs.contiguous(), from, at);
  write_ring(terminated_, step.terminated.contiguous(), from, at);
  cursor_ = (cursor_ + e) % capacity_;
  size_ = std::min(capacity_, size_ + e);
}

ReplayBatch ReplayBuffer::sample(int64_t batch_size, Generator& gen) const {
  constexpr const char* op = "ReplayBuffer.sample";
  KILN_CHECK(batch_size > 0, op, "batch_size must be positive, got {}", batch_size);
  KILN_CHECK(size_ > 0, op, "the buffer is empty: add transitions before sampling");
  const Tensor index = randint(0, size_, {batch_size}, gen);
  return ReplayBatch{.obs = index_select(obs_, 0, index),
                     .action = index_select(action_, 0, index),
                     .reward = index_select(reward_, 0, index),
                     .next_obs = index_select(next_obs_, 0, index),
                     .terminated = index_select(terminated_, 0, index)};
}

void ReplayBuffer::clear() {
  for (const Tensor& t : {obs_, action_, reward_, next_obs_, terminated_})
    std::memset(t.data_ptr(), 0, size_t(t.nbytes()));
  cursor_ = 0;
  size_ = 0;
}

void ReplayBuffer::checkpoint(io::Checkpoint& ckpt, const std::string& name) {
  ckpt.model(*storage_, name);
  ckpt.state(
      name, [this] { return state(); }, [this](const io::State& s) { load_state(s); });
}

io::State ReplayBuffer::state() const {
  return {
      {"capacity", std::to_string(capacity_)}, {"cursor", std::to_string(cursor_)}, {"size", std::to_string(size_)}};
}

void ReplayBuffer::load_state(const io::State& state) {
  constexpr const char* op = "ReplayBuffer.load_state";
  const int64_t capacity = io::state_i64(state, "capacity", op);
  const int64_t cursor = io::state_i64(state, "cursor", op);
  const int64_t size = io::state_i64(state, "size", op);
  KILN_CHECK(capacity == capacity_, op, "the state is of a buffer of capacity {}, this one holds {}", capacity,
             capacity_);
  KILN_CHECK(size >= 0 && size <= capacity_, op, "size {} is outside [0, {}]", size, capacity_);
  KILN_CHECK(cursor >= 0 && cursor < capacity_ && (size == capacity_ || cursor == size), op,
             "cursor {} does not fit size {} of capacity {} (a buffer that is not full has cursor == size)", cursor,
             size, capacity_);
  cursor_ = cursor;
  size_ = size;
}

}  // namespace kiln::rl
