// A Mamba-3 sequence backbone and byte-level language model (SPECS G3;
// docs/ssm.md; spec 002's backbone): an input projection (a byte or token
// embedding, the caller's own module, or none), n_layer blocks
// x + Mamba3(RMSNorm(x)), a final RMSNorm; MambaLM adds logits (a
// ByteOutputHead for bytes). Every block carries its recurrent state, so one
// token costs the same at any position (step). Letters: B batch, T time,
// D d_model, V vocab.
//
//   Rngs rngs(0);
//   models::MambaLM lm({.d_model = 128, .n_layer = 4}, rngs);  // bytes
//   Tensor logits = lm.forward(bytes_u8).first;                // [B, T] -> [B, T, 256]
//   auto [next, st] = lm.step(last_byte, st);                 // [B] -> [B, 256]
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/models/generate.h"
#include "kiln/nn/containers.h"
#include "kiln/nn/embedding.h"
#include "kiln/nn/init.h"
#include "kiln/nn/mamba3.h"
#include "kiln/nn/module.h"
#include "kiln/nn/norm.h"

namespace kiln::models {

struct MambaConfig {
  int64_t d_model = 128;
  int64_t n_layer = 4;
  int64_t vocab_size = 256;  // 256: bytes (u8 or i64 in [0, 256)); else token ids (i64)
  double norm_eps = 1e-5;
  int64_t d_state = 64;      // the mixer's options (nn::Mamba3Options)
  int64_t expand = 2;
  int64_t headdim = 32;
  double rope_fraction = 0.5;
  double dt_min = 1e-3, dt_max = 0.1;
  int64_t chunk_size = 32;

  nn::Mamba3Options mixer() const;
  /// kiln::Error ([MambaConfig] ...) naming the first bad field.
  void validate() const;
  std::string to_json() const;
  static MambaConfig from_json(std::string_view json);
};

/// One state per block.
using MambaState = std::vector<nn::Mamba3State>;

/// x + mixer(norm(x)).
class MambaBlock : public nn::Module {
 public:
  MambaBlock(const MambaConfig& config, const nn::Init& init);
  std::pair<Tensor, nn::Mamba3State> forward(const Tensor& x, const nn::Mamba3State& state = {}) const;

  nn::Shared<nn::RMSNorm> norm;
  nn::Shared<nn::Mamba3> mixer;
};

/// Tag selecting MambaBackbone's embedded-only constructor.
struct EmbeddedOnly {};

class MambaBackbone : public nn::Module {
 public:
  /// Bytes (vocab_size 256: a ByteEmbedding "embed", u8 or i64 input) or
  /// token ids (an Embedding "embed" of vocab_size rows, i64 input).
  MambaBackbone(const MambaConfig& config, const nn::Init& init);
  /// No embedding at all (no parameter, no optimizer state, no checkpoint
  /// entry): the caller feeds [B, T, D] features to forward_embedded;
  /// forward() is an error naming it.
  MambaBackbone(EmbeddedOnly, const MambaConfig& config, const nn::Init& init);
  /// The caller's own input projection, registered as "input_proj": any
  /// module whose forward maps the caller's input to [B, T, D] (e.g.
  /// nn::Linear(pose_dim, D) for continuous features).
  template <class M>
  MambaBackbone(nn::Shared<M> projection, const MambaConfig& config, const nn::Init& init)
      : MambaBackbone(EmbeddedOnly{}, config, init) {
    register_module("input_proj", projection);
    project_ = [p = projection](const Tensor& x) -> Tensor { return p->forward(x); };
    mode_ = Mode::projection;
  }

  /// input ([B, T] bytes / ids, or what the projection takes) -> ([B, T, D]
  /// after the final norm, the blocks' states). `state` empty: zeros.
  std::pair<Tensor, MambaState> forward(const Tensor& input, const MambaState& state = {}) const;
  /// Features [B, T, D] (already embedded) -> the same.
  std::pair<Tensor, MambaState> forward_embedded(const Tensor& x, const MambaState& state = {}) const;
  /// The zero state for `batch` sequences.
  MambaState zero_state(int64_t batch) const;

  const MambaConfig& config() const { return config_; }
  bool embedded_only() const { return mode_ == Mode::embedded; }

  std::vector<nn::Shared<MambaBlock>> blocks;
  nn::Shared<nn::RMSNorm> norm_f;

 private:
  enum class Mode { bytes, tokens, embedded, projection };
  Tensor embed(const Tensor& input) const;
  MambaConfig config_;
  Mode mode_ = Mode::embedded;
  nn::Shared<nn::ByteEmbedding> byte_embed_;
  nn::Shared<nn::Embedding> token_embed_;
  std::function<Tensor(const Tensor&)> project_;
};

/// The language model: MambaBackbone (bytes or tokens) and logits from a
/// ByteOutputHead "head" (vocab 256) or a Linear "head" (other vocabularies).
class MambaLM : public nn::Module {
 public:
  MambaLM(const MambaConfig& config, const nn::Init& init);

  /// idx [B, T] -> (logits [B, T, V], states).
  std::pair<Tensor, MambaState> forward(const Tensor& idx, const MambaState& state = {}) const;
  /// Mean cross-entropy of the next-token logits against targets [B, T] (i64).
  Tensor loss(const Tensor& idx, const Tensor& targets) const;
  /// One token per sequence: idx [B] -> (logits [B, V], states). `state`
  /// empty: zeros. The same values as forward on the whole sequence.
  std::pair<Tensor, MambaState> step(const Tensor& idx, const MambaState& state) const;

  const MambaConfig& config() const { return backbone->config(); }

  nn::Shared<MambaBackbone> backbone;
  nn::Shared<nn::ByteOutputHead> byte_head;  // vocab 256
  nn::Shared<nn::Linear> token_head;         // other vocabularies
};

/// Continues prompt (Tp >= 1 ids) by up to max_new_tokens tokens, as
/// models::generate does for a CausalLM (same options, draws and callback),
/// through the recurrent state: the prompt is one forward, then one step()
/// per token, so each token costs the same and memory does not grow with
/// the length (no context window).
std::vector<int64_t> generate(const MambaLM& model, const std::vector<int64_t>& prompt,
                              const GenerateOptions& options = {}, const TokenCallback& on_token = {});

}  // namespace kiln::models
