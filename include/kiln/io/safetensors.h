// safetensors files: the one on-disk layout of kiln's weights, checkpoints and
// model files, readable and writable by Hugging Face's safetensors library and
// PyTorch exports. Format, dtypes, atomicity and validation: docs/io.md.
#pragma once

#include <map>
#include <string>

#include "kiln/nn/state_dict.h"

namespace kiln::io {

/// Writes `tensors` (in their order, each contiguous, little-endian) and
/// `metadata` (the header's "__metadata__") to `path`, atomically: a temporary
/// file in the same folder is written, fsynced and renamed over `path`, so a
/// failed or interrupted save leaves any previous file intact.
///   io::save_safetensors("model.safetensors", model.state_dict(), {{"format", "pt"}});
void save_safetensors(const std::string& path, const nn::StateDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads every tensor of a safetensors file, in file (byte-offset) order. The
/// whole header is validated before any tensor is allocated; F16 tensors load
/// as f32. Throws kiln::Error("[load_safetensors] <path>: tensor 'x': ...").
///   nn::StateDict sd = io::load_safetensors("model.safetensors");
nn::StateDict load_safetensors(const std::string& path);

/// The "__metadata__" entry of a safetensors file (empty when absent), after
/// validating the header; tensor data is not read.
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);

}  // namespace kiln::io
