// kiln's nn attention benches: MultiheadAttention(256, 4) self-attention and a
// pre-norm TransformerBlock(256, 4) (F = 1024, gelu), forward + backward on
// x [8, 128, 256] f32 (mha_b8t128d256h4, transformer_block_b8t128d256h4).
#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

namespace {

constexpr int64_t kB = 8, kT = 128, kD = 256, kH = 4;

kiln::Tensor make_x() {
  kiln::Generator gen(5);
  kiln::Tensor x = kiln::randn({kB, kT, kD}, gen);
  x.requires_grad_(true);
  return x;
}

// out = layer(x); sum(out).backward(); grads dropped (set_to_none on the torch side).
template <class Forward>
void step(kiln::nn::Module& m, const kiln::Tensor& x, Forward&& forward) {
  kiln::sum(forward(x)).backward();
  m.zero_grad();
  x.set_grad(kiln::Tensor());
}

void bench_mha(const std::string& name) {
  kiln::Rngs rngs(0);
  kiln::nn::MultiheadAttention mha(kD, kH, rngs);
  kiln::Tensor x = make_x();
  emit(name, "time", "us/iter",
       seconds_per_call([&] {
         // need_weights = false (as the PyTorch side passes): the flash path.
         step(mha, x, [&](const kiln::Tensor& t) { return mha.forward(t, t, t, {.need_weights = false}).output; });
       }, 0.5) * 1e6);
}

void bench_block(const std::string& name) {
  kiln::Rngs rngs(0);
  kiln::nn::TransformerBlock block(kD, kH, rngs);
  kiln::Tensor x = make_x();
  emit(name, "time", "us/iter",
       seconds_per_call([&] { step(block, x, [&](const kiln::Tensor& t) { return block.forward(t); }); }, 0.5) * 1e6);
}

}  // namespace

void mha_benches(std::vector<Bench>& out) {
  out.push_back({"mha_b8t128d256h4", bench_mha});
  out.push_back({"transformer_block_b8t128d256h4", bench_block});
}

}  // namespace bench
