// The names CausalLMConfig's JSON gives its enums (src/models only): shared by
// the config's reader and writer and the model's extra_repr.
#pragma once

#include "kiln/nn/attention.h"

namespace kiln::models::detail {

const char* norm_name(nn::TransformerNorm n);
const char* mlp_name(nn::TransformerActivation a);

}  // namespace kiln::models::detail
