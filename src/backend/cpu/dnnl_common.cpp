#include "src/backend/cpu/dnnl_common.h"

namespace kiln::backend::cpu::dnnl_common {

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

}  // namespace kiln::backend::cpu::dnnl_common
