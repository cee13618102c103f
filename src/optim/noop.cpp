#include "kiln/optim/noop.h"

#include "src/optim/dispatch.h"

namespace kiln::optim {

void NoOpOptions::validate(const char* op) const { check_non_negative(op, "lr", lr); }

NoOp::NoOp(nn::ParameterList params, const NoOpOptions& options)
    : OptimizerWith("NoOp", std::vector<ParamGroup>{{std::move(params)}}, options, /*allow_empty=*/true) {}

}  // namespace kiln::optim
