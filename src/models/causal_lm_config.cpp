// CausalLMConfig: its validation and JSON form, apart from the model so that
// the config reader's fuzz target (tests/fuzz/model_config_fuzz.cpp) links
// without the layers.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <optional>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/io/json_util.h"
#include "kiln/models/causal_lm.h"
#include "src/models/causal_lm_names.h"

namespace kiln::models {

namespace detail {

const char* norm_name(nn::TransformerNorm n) { return n == nn::TransformerNorm::rms_norm ? "rms_norm" : "layer_norm"; }

const char* mlp_name(nn::TransformerActivation a) {
  switch (a) {
    case nn::TransformerActivation::gelu: return "gelu";
    case nn::TransformerActivation::gelu_tanh: return "gelu_tanh";
    case nn::TransformerActivation::relu: return "relu";
    case nn::TransformerActivation::swiglu: return "swiglu";
  }
  return "?";
}

const char* moe_balance_name(nn::MoEBalance b) {
  return b == nn::MoEBalance::aux ? "aux" : b == nn::MoEBalance::bias ? "bias" : "none";
}

std::optional<nn::MoEBalance> parse_moe_balance(std::string_view s) {
  if (s == "none") return nn::MoEBalance::none;
  if (s == "aux") return nn::MoEBalance::aux;
  if (s == "bias") return nn::MoEBalance::bias;
  return std::nullopt;
}

}  // namespace detail

namespace {
constexpr const char* kLm = "CausalLM";
}  // namespace

using detail::mlp_name;
using detail::moe_balance_name;
using detail::parse_moe_balance;
using detail::norm_name;

// ---- CausalLMConfig ----

void CausalLMConfig::validate() const {
  KILN_CHECK(vocab_size > 0 && block_size > 0 && n_layer > 0 && n_head > 0 && n_embd > 0, kLm,
             "vocab_size {}, block_size {}, n_layer {}, n_head {} and n_embd {} must be positive", vocab_size,
             block_size, n_layer, n_head, n_embd);
  // No model kiln can hold comes near 2^24 in any of these (GPT-3's n_embd is
  // 12288); a larger value is a damaged or hostile config, and would overflow
  // the sizes computed from it (hidden() is 4 * n_embd).
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  for (auto [name, v] : {std::pair{"vocab_size", vocab_size}, std::pair{"block_size", block_size},
                         std::pair{"n_layer", n_layer}, std::pair{"n_head", n_head}, std::pair{"n_embd", n_embd},
                         std::pair{"mlp_hidden", mlp_hidden}})
    KILN_CHECK(v <= kMaxDim, kLm, "{} {} is larger than any model kiln can hold (at most 2^24 = {})", name, v, kMaxDim);
  KILN_CHECK(n_embd % n_head == 0, kLm, "n_embd {} is not divisible by n_head {}", n_embd, n_head);
  KILN_CHECK(dropout >= 0 && dropout < 1, kLm, "dropout must be in [0, 1), got {}", dropout);
  KILN_CHECK(norm_eps > 0, kLm, "norm_eps must be positive, got {}", norm_eps);
  KILN_CHECK(mlp_hidden >= 0, kLm, "mlp_hidden must be >= 0 (0: the default width), got {}", mlp_hidden);
  if (moe_experts != 0) {
    KILN_CHECK(moe_experts > 0 && moe_experts <= 4096, kLm, "moe_experts must be in [0, 4096], got {}", moe_experts);
    KILN_CHECK(moe_top_k >= 1 && moe_top_k <= moe_experts, kLm, "moe_top_k {} must be in [1, moe_experts = {}]",
               moe_top_k, moe_experts);
    KILN_CHECK(moe_hidden >= 0 && moe_hidden <= kMaxDim, kLm, "moe_hidden must be in [0, 2^24] (0: the default), got {}",
               moe_hidden);
    KILN_CHECK(mlp == nn::TransformerActivation::gelu || mlp == nn::TransformerActivation::swiglu, kLm,
               "MoE experts are gelu or swiglu MLPs; mlp is {}", mlp_name(mlp));
    KILN_CHECK(moe_aux_coef >= 0 && moe_z_coef >= 0 && moe_bias_rate >= 0, kLm,
               "moe_aux_coef {}, moe_z_coef {} and moe_bias_rate {} must be >= 0", moe_aux_coef, moe_z_coef,
               moe_bias_rate);
  }
  KILN_CHECK(!rotary || ((n_embd / n_head) % 2 == 0 && rotary_base > 0), kLm,
             "rotary needs an even head width n_embd / n_head and rotary_base > 0, got {} / {} = {} and {}", n_embd,
             n_head, n_embd / n_head, rotary_base);
}

int64_t CausalLMConfig::hidden() const {
  if (mlp_hidden > 0) return mlp_hidden;
  if (mlp != nn::TransformerActivation::swiglu) return 4 * n_embd;
  const int64_t f = (8 * n_embd + 2) / 3;  // ceil(2/3 * 4C): the same parameters as a 4C GELU MLP
  return (f + 63) / 64 * 64;
}

nn::MoEOptions CausalLMConfig::moe_options() const {
  const int64_t k = std::max<int64_t>(moe_top_k, 1);
  return {.num_experts = moe_experts,
          .top_k = moe_top_k,
          .expert_hidden = moe_hidden > 0 ? moe_hidden : std::max<int64_t>(hidden() / k, 1),
          .activation = mlp == nn::TransformerActivation::swiglu ? nn::ExpertActivation::swiglu
                                                                 : nn::ExpertActivation::gelu,
          .renormalize = moe_renormalize,
          .balance = moe_balance,
          .aux_loss_coef = moe_aux_coef,
          .z_loss_coef = moe_z_coef,
          .bias_update_rate = moe_bias_rate};
}

std::string CausalLMConfig::to_json() const {
  nlohmann::ordered_json j;
  j["vocab_size"] = vocab_size;
  j["block_size"] = block_size;
  j["n_layer"] = n_layer;
  j["n_head"] = n_head;
  j["n_embd"] = n_embd;
  j["dropout"] = dropout;
  j["bias"] = bias;
  j["norm"] = norm_name(norm);
  j["norm_eps"] = norm_eps;
  j["learned_positions"] = learned_positions;
  j["rotary"] = rotary;
  j["rotary_base"] = rotary_base;
  j["mlp"] = mlp_name(mlp);
  j["mlp_hidden"] = mlp_hidden;
  j["tie_weights"] = tie_weights;
  if (moe_experts > 0) {
    j["moe_experts"] = moe_experts;
    j["moe_top_k"] = moe_top_k;
    j["moe_hidden"] = moe_hidden;
    j["moe_renormalize"] = moe_renormalize;
    j["moe_balance"] = moe_balance_name(moe_balance);
    j["moe_aux_coef"] = moe_aux_coef;
    j["moe_z_coef"] = moe_z_coef;
    j["moe_bias_rate"] = moe_bias_rate;
  }
  return j.dump();
}

CausalLMConfig CausalLMConfig::from_json(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  KILN_CHECK(j.is_object(), kLm, "config JSON must be an object, got '{}'",
             text.size() > 60 ? std::string(text.substr(0, 60)) + "..." : std::string(text));
  CausalLMConfig c;
  for (const auto& item : j.items()) {
    // Not a structured binding: clang 14 (the fuzz build) cannot capture one in the lambdas below.
    const std::string& key = item.key();
    const nlohmann::json& v = item.value();
    auto read = [&](auto& out) { io::detail::read_config_field(kLm, key, v, out); };
    if (key == "vocab_size") read(c.vocab_size);
    else if (key == "block_size") read(c.block_size);
    else if (key == "n_layer") read(c.n_layer);
    else if (key == "n_head") read(c.n_head);
    else if (key == "n_embd") read(c.n_embd);
    else if (key == "dropout") read(c.dropout);
    else if (key == "bias") read(c.bias);
    else if (key == "norm_eps") read(c.norm_eps);
    else if (key == "learned_positions") read(c.learned_positions);
    else if (key == "rotary") read(c.rotary);
    else if (key == "rotary_base") read(c.rotary_base);
    else if (key == "mlp_hidden") read(c.mlp_hidden);
    else if (key == "tie_weights") read(c.tie_weights);
    else if (key == "moe_experts") read(c.moe_experts);
    else if (key == "moe_top_k") read(c.moe_top_k);
    else if (key == "moe_hidden") read(c.moe_hidden);
    else if (key == "moe_renormalize") read(c.moe_renormalize);
    else if (key == "moe_aux_coef") read(c.moe_aux_coef);
    else if (key == "moe_z_coef") read(c.moe_z_coef);
    else if (key == "moe_bias_rate") read(c.moe_bias_rate);
    else if (key == "moe_balance") {
      const std::string s = v.is_string() ? v.get<std::string>() : std::string();
      const auto b = parse_moe_balance(s);
      KILN_CHECK(b.has_value(), kLm, "config field 'moe_balance' must be \"none\", \"aux\" or \"bias\", got {}",
                 io::detail::brief(v));
      c.moe_balance = *b;
    }
    else if (key == "norm") {
      const std::string s = v.is_string() ? v.get<std::string>() : std::string();
      KILN_CHECK(s == "layer_norm" || s == "rms_norm", kLm,
                 "config field 'norm' must be \"layer_norm\" or \"rms_norm\", got {}", io::detail::brief(v));
      c.norm = s == "rms_norm" ? nn::TransformerNorm::rms_norm : nn::TransformerNorm::layer_norm;
    } else if (key == "mlp") {
      const std::string s = v.is_string() ? v.get<std::string>() : std::string();
      bool found = false;
      for (auto a : {nn::TransformerActivation::gelu, nn::TransformerActivation::gelu_tanh,
                     nn::TransformerActivation::relu, nn::TransformerActivation::swiglu}) {
        if (s == mlp_name(a)) {
          c.mlp = a;
          found = true;
        }
      }
      KILN_CHECK(found, kLm, "config field 'mlp' must be \"gelu\", \"gelu_tanh\", \"relu\" or \"swiglu\", got {}",
                 io::detail::brief(v));
    } else {
      KILN_FAIL(kLm, "unknown config field '{}'", key);
    }
  }
  c.validate();
  return c;
}

}  // namespace kiln::models
