// Checkpoint save and load (bench/run checkpoint_10m), the same workload as
// bench/torch_io.py: the 10,000,360 f32 parameters of bench/optim_bench.cpp's
// adamw_10m after one AdamW step, so the file holds the parameters and both
// moments (120 MB).
//
// Metrics:
//   save     ms per io::Checkpoint::save: gather, CRC32C, write, fsync,
//            rename, fsync of the folder (torch: torch.save to a temporary,
//            fsync, os.replace, fsync of the folder: the same durability)
//   load     ms per io::Checkpoint::load: validate, check checksums, restore
//            model and optimizer (torch: torch.load + both load_state_dicts)
//   file_size  the file's size in bytes
// The folder is $KILN_BENCH_DIR or /tmp; the file stays in the page cache, so
// load measures memory traffic, not the disk.
#include <cstdlib>
#include <filesystem>

#include "bench/bench.h"
#include "kiln/kiln.h"

namespace bench {

std::vector<kiln::Shape> shapes_10m();  // optim_bench.cpp

namespace {

struct Params : kiln::nn::Module {
  explicit Params(const std::vector<kiln::Shape>& shapes) {
    kiln::Generator gen(0);
    for (size_t i = 0; i < shapes.size(); ++i) register_parameter(std::to_string(i), kiln::randn(shapes[i], gen));
  }
};

void bench_checkpoint(const std::string& name) {
  using namespace kiln;
  const char* dir = std::getenv("KILN_BENCH_DIR");
  std::string path = std::string(dir ? dir : "/tmp") + "/kiln_bench_" + name + ".safetensors";
  Params model(shapes_10m());
  optim::AdamW opt(model.parameters(), {.lr = 1e-3});
  Generator gen(1);
  for (const nn::Parameter& p : model.parameters()) p.value().set_grad(randn(p.shape(), gen));
  opt.step();  // allocates both moments
  io::Checkpoint ckpt;
  ckpt.model(model).optimizer(opt);
  emit(name, "save", "ms/save", seconds_per_call([&] { ckpt.save(path); }, 1.0) * 1e3);
  emit(name, "load", "ms/load", seconds_per_call([&] { ckpt.load(path); }, 1.0) * 1e3);
  emit(name, "file_size", "bytes", double(std::filesystem::file_size(path)));
  std::filesystem::remove(path);
}

}  // namespace

void io_benches(std::vector<Bench>& out) { out.push_back({"checkpoint_10m", bench_checkpoint}); }

}  // namespace bench
