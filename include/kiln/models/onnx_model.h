// models::OnnxModel: an ONNX graph (io::read_onnx) run with kiln's ops, as an
// nn::Module whose floating initializers are its parameters and the others
// (int64 shape constants, ...) its buffers, under their ONNX names
// ("fc1.weight" is parameter "weight" of child "fc1", so state_dict() keys are
// the ONNX names). Supported operators, their ONNX semantics and opset
// differences: docs/model_files.md, "ONNX".
//
//   models::OnnxModel m = models::load_onnx("mlp.onnx");
//   std::vector<Tensor> out = m.forward({x});   // x [batch, 784] f32 -> {[batch, 10]}
//   io::save_safetensors("mlp.safetensors", m.state_dict());
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/io/onnx.h"
#include "kiln/nn/module.h"

namespace kiln::models {

/// The standard-domain operator types OnnxModel runs, sorted.
std::vector<std::string> onnx_supported_ops();

class OnnxModel : public nn::Module {
 public:
  /// Checks every node (operator type, domain, attributes that kiln cannot
  /// honour) and throws ONE kiln::Error listing all unsupported operators with
  /// their node names before anything is registered or run:
  ///   "[onnx] m.onnx: 2 unsupported operators (nothing was run): Loop (node 'loop0'),
  ///    NonZero (nodes 'nz1', 'nz2'). kiln runs: Abs, Add, ..."
  explicit OnnxModel(io::OnnxModelFile file);

  /// Runs the graph on the graph inputs in their declared order (inputs()),
  /// returns the graph outputs in theirs. Each input's dtype, rank and fixed
  /// dims are checked against the declaration. An op's error is rethrown
  /// naming the node: "[onnx] node Conv 'conv1': [conv2d] ...". Records the
  /// autograd tape like any kiln ops (wrap in NoGradGuard for inference).
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) const;

  const std::vector<io::OnnxValueInfo>& inputs() const { return file_.inputs; }
  const std::vector<io::OnnxValueInfo>& outputs() const { return file_.outputs; }
  int64_t opset() const { return opset_; }
  const io::OnnxModelFile& graph() const { return file_; }
  /// The state-dict key of an initializer (its ONNX name unless that name
  /// cannot be a module path, e.g. "a..b": then '.' becomes '_').
  const std::string& state_name(const std::string& onnx_name) const;

 private:
  io::OnnxModelFile file_;  // initializers moved out into the module's slots
  int64_t opset_ = 0;
  // ONNX name -> the registered slot: read at each forward, so that
  // load_state_dict and functional calls are seen.
  std::map<std::string, nn::Parameter> params_;
  std::map<std::string, Tensor> buffers_;
  std::map<std::string, std::string> state_names_;
  std::vector<std::vector<std::string>> release_after_;  // values no later node reads, per node
};

/// io::read_onnx + OnnxModel.
OnnxModel load_onnx(const std::string& path);

}  // namespace kiln::models
