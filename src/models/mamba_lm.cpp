// MambaBackbone, MambaBlock and MambaLM (kiln/models/mamba_lm.h; docs/ssm.md).
#include "kiln/models/mamba_lm.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "kiln/io/json_util.h"
#include "kiln/nn/linear.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/loss.h"
#include "kiln/ops/creation.h"
#include "kiln/ops/shape.h"
#include "kiln/core/grad_mode.h"

namespace kiln::models {

namespace {
constexpr const char* kCfg = "MambaConfig";
constexpr const char* kBackbone = "MambaBackbone";
constexpr const char* kLm = "MambaLM";
}  // namespace

// ---- MambaConfig ----

nn::Mamba3Options MambaConfig::mixer() const {
  nn::Mamba3Options o;
  o.d_state = d_state;
  o.expand = expand;
  o.headdim = headdim;
  o.rope_fraction = rope_fraction;
  o.dt_min = dt_min;
  o.dt_max = dt_max;
  o.chunk_size = chunk_size;
  return o;
}

void MambaConfig::validate() const {
  KILN_CHECK(d_model > 0, kCfg, "d_model must be positive, got {}", d_model);
  KILN_CHECK(n_layer > 0, kCfg, "n_layer must be positive, got {}", n_layer);
  KILN_CHECK(vocab_size > 0, kCfg, "vocab_size must be positive, got {}", vocab_size);
  KILN_CHECK(norm_eps > 0, kCfg, "norm_eps must be positive, got {}", norm_eps);
  KILN_CHECK(d_state > 0 && expand > 0 && headdim > 0, kCfg, "d_state {}, expand {}, headdim {} must be positive",
             d_state, expand, headdim);
  KILN_CHECK(expand * d_model % headdim == 0, kCfg, "expand * d_model = {} must be a multiple of headdim {}",
             expand * d_model, headdim);
  KILN_CHECK(rope_fraction == 0.5 || rope_fraction == 1.0, kCfg, "rope_fraction must be 0.5 or 1.0, got {}",
             rope_fraction);
  KILN_CHECK(dt_min > 0 && dt_max >= dt_min, kCfg, "dt range [{}, {}] must be positive and ordered", dt_min, dt_max);
  KILN_CHECK(chunk_size > 0, kCfg, "chunk_size must be positive, got {}", chunk_size);
}

std::string MambaConfig::to_json() const {
  nlohmann::ordered_json j;
  j["arch"] = "mamba3";
  j["d_model"] = d_model;
  j["n_layer"] = n_layer;
  j["vocab_size"] = vocab_size;
  j["norm_eps"] = norm_eps;
  j["d_state"] = d_state;
  j["expand"] = expand;
  j["headdim"] = headdim;
  j["rope_fraction"] = rope_fraction;
  j["dt_min"] = dt_min;
  j["dt_max"] = dt_max;
  j["chunk_size"] = chunk_size;
  return j.dump();
}

MambaConfig MambaConfig::from_json(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  KILN_CHECK(j.is_object(), kCfg, "config JSON must be an object");
  MambaConfig c;
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    const nlohmann::json& v = item.value();
    auto read = [&](auto& out) { io::detail::read_config_field(kCfg, key, v, out); };
    if (key == "arch") {
      KILN_CHECK(v.is_string() && v.get<std::string>() == "mamba3", kCfg, "config field 'arch' must be \"mamba3\"");
    } else if (key == "d_model") read(c.d_model);
    else if (key == "n_layer") read(c.n_layer);
    else if (key == "vocab_size") read(c.vocab_size);
    else if (key == "norm_eps") read(c.norm_eps);
    else if (key == "d_state") read(c.d_state);
    else if (key == "expand") read(c.expand);
    else if (key == "headdim") read(c.headdim);
    else if (key == "rope_fraction") read(c.rope_fraction);
    else if (key == "dt_min") read(c.dt_min);
    else if (key == "dt_max") read(c.dt_max);
    else if (key == "chunk_size") read(c.chunk_size);
    else KILN_FAIL(kCfg, "unknown config field '{}'", key);
  }
  c.validate();
  return c;
}

// ---- MambaBlock ----

MambaBlock::MambaBlock(const MambaConfig& c, const nn::Init& init) {
  norm = register_module("norm", nn::RMSNorm({c.d_model}, init, c.norm_eps));
  mixer = register_module("mixer", nn::Mamba3(c.d_model, c.mixer(), init));
}

std::pair<Tensor, nn::Mamba3State> MambaBlock::forward(const Tensor& x, const nn::Mamba3State& state) const {
  auto [y, st] = mixer->forward(norm->forward(x), state);
  return {add(x, y), st};
}

// ---- MambaBackbone ----

MambaBackbone::MambaBackbone(EmbeddedOnly, const MambaConfig& c, const nn::Init& init) : config_(c) {
  c.validate();
  auto list = register_module("layers", nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer; ++i) blocks.push_back(list->push_back(MambaBlock(c, init)));
  norm_f = register_module("norm_f", nn::RMSNorm({c.d_model}, init, c.norm_eps));
  mode_ = Mode::embedded;
}

MambaBackbone::MambaBackbone(const MambaConfig& c, const nn::Init& init) : config_(c) {
  c.validate();
  // The embedding first, so that its parameters come first (as a GPT's wte).
  if (c.vocab_size == 256) {
    byte_embed_ = register_module("embed", nn::ByteEmbedding(c.d_model, init));
    mode_ = Mode::bytes;
  } else {
    token_embed_ = register_module("embed", nn::Embedding(c.vocab_size, c.d_model, init));
    mode_ = Mode::tokens;
  }
  auto list = register_module("layers", nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer; ++i) blocks.push_back(list->push_back(MambaBlock(c, init)));
  norm_f = register_module("norm_f", nn::RMSNorm({c.d_model}, init, c.norm_eps));
}

Tensor MambaBackbone::embed(const Tensor& input) const {
  KILN_CHECK(input.defined(), kBackbone, "input is an undefined tensor");
  switch (mode_) {
    case Mode::embedded:
      KILN_FAIL(kBackbone,
                "forward() is unavailable on an embedded-only backbone (it has no embedding): call "
                "forward_embedded(x [B, T, {}]) with your own features, got input {}",
                config_.d_model, to_string(input.shape()));
    case Mode::bytes:
      KILN_CHECK(input.dim() == 2, kBackbone, "bytes {} must be [B, T] (u8 or i64)", to_string(input.shape()));
      return byte_embed_->forward(input);
    case Mode::tokens:
      KILN_CHECK(input.dtype() != DType::u8, kBackbone,
                 "u8 input {} into a token-id model (vocab_size {}): pass i64 token ids (bytes need vocab_size 256)",
                 to_string(input.shape()), config_.vocab_size);
      KILN_CHECK(input.dim() == 2, kBackbone, "token ids {} must be [B, T] (i64)", to_string(input.shape()));
      return token_embed_->forward(input);
    case Mode::projection: {
      Tensor x;
      try {
        x = project_(input);
      } catch (const Error& e) {
        KILN_FAIL(kBackbone, "input_proj on input {}: {}", to_string(input.shape()), e.what());
      }
      KILN_CHECK(x.dim() == 3 && x.shape()[2] == config_.d_model, kBackbone,
                 "input_proj maps input {} to {}, expected [B, T, {}]", to_string(input.shape()),
                 to_string(x.shape()), config_.d_model);
      return x;
    }
  }
  return {};
}

std::pair<Tensor, MambaState> MambaBackbone::forward(const Tensor& input, const MambaState& state) const {
  return forward_embedded(embed(input), state);
}

std::pair<Tensor, MambaState> MambaBackbone::forward_embedded(const Tensor& x, const MambaState& state) const {
  KILN_CHECK(x.defined() && x.dim() == 3 && x.shape()[2] == config_.d_model, kBackbone,
             "features {} must be [B, T, {}] (d_model)", x.defined() ? to_string(x.shape()) : "undefined",
             config_.d_model);
  KILN_CHECK(state.empty() || state.size() == blocks.size(), kBackbone,
             "state has {} layer states, the model has {} layers", state.size(), blocks.size());
  Tensor h = x;
  MambaState out(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    auto [y, st] = blocks[i]->forward(h, state.empty() ? nn::Mamba3State{} : state[i]);
    h = y;
    out[i] = st;
  }
  return {norm_f->forward(h), out};
}

MambaState MambaBackbone::zero_state(int64_t batch) const {
  MambaState s;
  for (const auto& b : blocks) s.push_back(b->mixer->zero_state(batch));
  return s;
}

// ---- MambaLM ----

MambaLM::MambaLM(const MambaConfig& c, const nn::Init& init) {
  backbone = register_module("backbone", MambaBackbone(c, init));
  if (c.vocab_size == 256) byte_head = register_module("head", nn::ByteOutputHead(c.d_model, init, /*bias=*/false));
  else token_head = register_module("head", nn::Linear(c.d_model, c.vocab_size, init, /*bias=*/false));
}

std::pair<Tensor, MambaState> MambaLM::forward(const Tensor& idx, const MambaState& state) const {
  auto [h, st] = backbone->forward(idx, state);
  return {byte_head ? byte_head->forward(h) : token_head->forward(h), st};
}

Tensor MambaLM::loss(const Tensor& idx, const Tensor& targets) const {
  Tensor logits = forward(idx).first;
  const int64_t B = logits.shape()[0], T = logits.shape()[1], V = logits.shape()[2];
  KILN_CHECK(targets.defined() && targets.shape() == Shape({B, T}), kLm, "targets {} must be [B, T] = [{}, {}]",
             targets.defined() ? to_string(targets.shape()) : "undefined", B, T);
  return cross_entropy(reshape(logits, {B * T, V}), reshape(targets, {B * T}));
}

std::pair<Tensor, MambaState> MambaLM::step(const Tensor& idx, const MambaState& state) const {
  KILN_CHECK(idx.defined() && idx.dim() == 1, kLm, "step: idx {} must be [B] (one token per sequence)",
             idx.defined() ? to_string(idx.shape()) : "undefined");
  auto [logits, st] = forward(unsqueeze(idx, 1), state);
  return {select(logits, 1, 0), st};
}

std::vector<int64_t> generate(const MambaLM& model, const std::vector<int64_t>& prompt, const GenerateOptions& o,
                              const TokenCallback& on_token) {
  const int64_t V = model.config().vocab_size;
  KILN_CHECK(!prompt.empty(), "generate", "the prompt must hold at least one token");
  for (int64_t t : prompt)
    KILN_CHECK(t >= 0 && t < V, "generate", "prompt token {} is outside [0, {})", t, V);
  KILN_CHECK(o.max_new_tokens >= 0, "generate", "max_new_tokens must be non-negative, got {}", o.max_new_tokens);
  const SamplingOptions so{.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p};
  sampling_probs(zeros({V}), so);  // checks the options before any work
  NoGradGuard no_grad;
  Generator gen(o.seed);
  auto [logits, state] = model.forward(tensor(prompt, {1, int64_t(prompt.size())}));
  Tensor last = select(select(logits, 0, 0), 0, int64_t(prompt.size()) - 1);  // [V]
  std::vector<int64_t> out;
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    const int64_t tok = sample_token(last, so, gen);
    out.push_back(tok);
    if (on_token) on_token(tok);
    if (std::find(o.stop.begin(), o.stop.end(), tok) != o.stop.end()) break;
    if (i + 1 == o.max_new_tokens) break;
    auto [next, st] = model.step(tensor(std::vector<int64_t>{tok}, {1}), state);
    last = select(next, 0, 0);
    state = std::move(st);
  }
  return out;
}

}  // namespace kiln::models
