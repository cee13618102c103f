// The main job: train an image classifier on Fashion-MNIST with the progress
// bar, validate on the test split each epoch, log every step to CSV, keep
// rotating resumable checkpoints, print the summary and the final test
// accuracy. `kiln train fashion-mnist` is a thin command line over this.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace kiln::app {

struct FashionMnistOptions {
  std::string model = "cnn";  // "cnn" (models::image_cnn) or "mlp" (models::image_mlp)
  int64_t epochs = 0;         // 0: the model's default (default_epochs)
  int64_t batch_size = 64;
  double lr = 1e-3;           // AdamW's peak rate; cosine decay to lr/100 over the run
  double weight_decay = 1e-4;
  int threads = 0;            // 0: kiln's default (all cores)
  uint64_t seed = 0;          // parameters, dropout and data order
  std::string out = "runs/fashion-mnist";  // metrics.csv and checkpoints/ go here
  std::string data = "";         // folder of the IDX files; "": data::FashionMNIST's default
  std::string resume = "";       // "": a new run; "latest": the newest checkpoint in out; else a path
  bool overwrite = false;        // a new run may replace the run in out (moved aside until its first checkpoint)
  std::vector<std::string> overrides = {};  // hyper-parameters a resume may change ("lr", ...; "all": any)
  std::string on_nan = "stop";   // a NaN or infinite loss: "stop" the run (no checkpoint of it) or "skip" the step
  int64_t limit = 0;          // use only the first `limit` training images (0: all 60000)
  int64_t test_limit = 0;     // and the first `test_limit` test images (0: all 10000)
  bool compile = false;       // record the training step once and replay it (docs/compile.md); same results
  std::string memory_budget = "";  // "": --batch-size; else the batch fit_to_memory picks ("256M", "1G", "auto")
  std::ostream* log = nullptr;    // where output goes; nullptr: std::cout
  std::optional<bool> tty = {};    // progress bar in place; default: whether stdout is a terminal
};

struct FashionMnistResult {
  double test_accuracy = 0;
  double test_loss = 0;
  int64_t epochs = 0;          // epochs completed in all (resumed runs count the earlier ones)
  double train_seconds = 0;    // this process's training time, validation excluded
  std::string checkpoint;      // the newest checkpoint
  std::string csv;             // the per-step log
  int signal = 0;              // the SIGINT or SIGTERM that stopped the run early; 0: none
};

/// 10 for the CNN, 20 for the MLP.
int64_t default_epochs(const std::string& model);

/// Runs the job; kiln::Error on bad options, missing data, a folder holding
/// another run (without resume or overwrite), a checkpoint that does not
/// match, or a non-finite loss (on_nan "stop"). SIGINT and SIGTERM end it
/// after the current step with a checkpoint (result.signal says which).
FashionMnistResult train_fashion_mnist(const FashionMnistOptions& options);

}  // namespace kiln::app
