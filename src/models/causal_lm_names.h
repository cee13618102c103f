// The names CausalLMConfig's JSON gives its enums (src/models only): shared by
// the config's reader and writer and the model's extra_repr.
#pragma once

#include <optional>
#include <string_view>

#include "kiln/nn/attention.h"

namespace kiln::models::detail {

const char* norm_name(nn::TransformerNorm n);
const char* mlp_name(nn::TransformerActivation a);
const char* moe_balance_name(nn::MoEBalance b);
std::optional<nn::MoEBalance> parse_moe_balance(std::string_view s);

}  // namespace kiln::models::detail
