#include "src/ops/cpu/dnnl_common.h"

namespace kiln::cpu::dnnl_common {

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

}  // namespace kiln::cpu::dnnl_common
