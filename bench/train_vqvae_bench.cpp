// Training workload vqvae_b128 (issue 27; bench/torch_train_vqvae.py is
// PyTorch's side, the model of tools/vqvae_reference.py): one step of
// `kiln train vqvae fashion-mnist`'s recipe (K 256, D 64, one level) on a fixed
// batch of 128 uniform [0, 1] images: forward, MSE + commitment, backward,
// Adam (lr 1e-3), the codebook's EMA update. epoch_s = 60000 images / throughput.
#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

namespace {

void vqvae_step_bench(const std::string& name, int64_t batch, int64_t levels) {
  using namespace kiln;
  MemoryProbe mem;
  Rngs rngs(0);
  models::VQVAE model(rngs, {.codebook_size = 256, .dim = 64, .levels = levels});
  optim::Adam opt(model.parameters(), {.lr = 1e-3});
  Generator gen(1);
  Tensor x = rand({batch, 1, 28, 28}, gen);
  Workload w{.unit = "samples/s", .items_per_step = double(batch)};
  double sec = seconds_per_call(
      [&] {
        models::VQVAEOutput out = model.forward(x);
        if (train::update(mse_loss(out.recon, x) + out.commitment_loss, opt)) model.ema_update(out);
      },
      0.5);
  emit(name, "throughput", w.unit, double(batch) / sec);
  emit(name, "epoch_s", "s", 60000.0 / double(batch) * sec);
  emit(name, "peak_mem", "MB", mem.added_mb());
  emit(name, "peak_rss", "MB", mem.peak_mb());
}

}  // namespace

void train_vqvae_benches(std::vector<Bench>& out) {
  out.push_back({"vqvae_b128", [](const std::string& n) { vqvae_step_bench(n, 128, 1); }});
  out.push_back({"vqvae_rvq4_b128", [](const std::string& n) { vqvae_step_bench(n, 128, 4); }});
}

}  // namespace bench
