// Q8_0 / Q4_0 quantized weights for inference (include/kiln/nn/quantized.h).
#include "kiln/nn/quantized.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "kiln/core/error.h"
#include "kiln/core/grad_mode.h"
#include "kiln/core/parallel.h"
#include "kiln/nn/attention.h"
#include "kiln/ops/linalg.h"
#include "src/backend/cpu/quant/quant.h"

namespace kiln::nn {
namespace cpu = backend::cpu;
// quantized_linear's input rows from which it dequantizes and runs the f32 GEMM.
constexpr int64_t kDequantizeBatch = 32;
static_assert(kQuantBlock == cpu::kQuantBlock);

const char* quant_type_name(QuantType type) { return type == QuantType::q8_0 ? "q8_0" : "q4_0"; }

QuantType parse_quant_type(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (n == "q8_0" || n == "q8") return QuantType::q8_0;
  if (n == "q4_0" || n == "q4") return QuantType::q4_0;
  throw Error("quantize", fmt::format("unknown quantization '{}' (kiln has q8_0 and q4_0)", name));
}

int64_t QuantizedTensor::nbytes() const {
  return (codes.defined() ? codes.nbytes() : 0) + (scales.defined() ? scales.nbytes() : 0);
}

void check_quantized(const char* op, const std::string& what, const QuantizedTensor& q) {
  auto bad = [&](const std::string& m) { throw Error(op, what + ": " + m); };
  if (q.shape.size() != 2 || q.shape[0] < 0 || q.shape[1] < 0 || q.shape[1] % kQuantBlock != 0)
    bad(fmt::format("a quantized matrix is [rows, cols] with cols a multiple of {}, got {}", kQuantBlock,
                    to_string(q.shape)));
  int64_t rows = q.shape[0], cols = q.shape[1];
  Shape codes{rows, q.type == QuantType::q8_0 ? cols : cols / 2}, scales{rows, cols / kQuantBlock};
  if (!q.codes.defined() || q.codes.dtype() != kU8 || q.codes.shape() != codes || !q.codes.is_contiguous() ||
      q.codes.device() != kCPU)
    bad(fmt::format("{} codes must be contiguous u8 {} on the CPU, got {}", quant_type_name(q.type), to_string(codes),
                    q.codes.defined() ? fmt::format("{} {}", kiln::name(q.codes.dtype()), to_string(q.codes.shape()))
                                      : std::string("undefined")));
  if (!q.scales.defined() || q.scales.dtype() != kF32 || q.scales.shape() != scales || !q.scales.is_contiguous() ||
      q.scales.device() != kCPU)
    bad(fmt::format("scales must be contiguous f32 {} on the CPU, got {}", to_string(scales),
                    q.scales.defined()
                        ? fmt::format("{} {}", kiln::name(q.scales.dtype()), to_string(q.scales.shape()))
                        : std::string("undefined")));
}

QuantizedTensor quantize(const Tensor& w, QuantType type) {
  KILN_CHECK(w.defined() && w.dim() == 2 && w.size(1) % kQuantBlock == 0, "quantize",
             "weight must be a matrix [rows, cols] with cols a multiple of {}, got {}", kQuantBlock,
             w.defined() ? to_string(w.shape()) : std::string("undefined"));
  KILN_CHECK(w.dtype() == kF32 || w.dtype() == kBF16 || w.dtype() == kF64, "quantize",
             "weight must be floating (f32, bf16 or f64), got {}", kiln::name(w.dtype()));
  KILN_CHECK(w.device() == kCPU, "quantize", "weight must be on the CPU, got {}", w.device().str());
  Tensor x = w.detach().to(kF32).contiguous();
  int64_t rows = w.size(0), cols = w.size(1);
  QuantizedTensor q;
  q.type = type;
  q.shape = {rows, cols};
  q.codes = Tensor::empty({rows, type == QuantType::q8_0 ? cols : cols / 2}, kU8);
  q.scales = Tensor::empty({rows, cols / kQuantBlock}, kF32);
  const float* src = x.data<float>();
  auto* codes = static_cast<uint8_t*>(q.codes.data_ptr());
  float* scales = q.scales.data<float>();
  parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (type == QuantType::q8_0)
        cpu::quantize_row_q8_0(src + r * cols, cols, reinterpret_cast<int8_t*>(codes + r * cols),
                               scales + r * (cols / kQuantBlock));
      else
        cpu::quantize_row_q4_0(src + r * cols, cols, codes + r * (cols / 2), scales + r * (cols / kQuantBlock));
    }
  });
  return q;
}

Tensor dequantize(const QuantizedTensor& q) {
  check_quantized("dequantize", "weight", q);
  int64_t rows = q.rows(), cols = q.cols();
  Tensor out = Tensor::empty({rows, cols}, kF32);
  const auto* codes = static_cast<const uint8_t*>(q.codes.data_ptr());
  const float* scales = q.scales.data<float>();
  parallel_for(0, rows, 64, [&](int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    if (q.type == QuantType::q8_0)
      cpu::dequantize_row_q8_0(reinterpret_cast<const int8_t*>(codes + r * cols), scales + r * (cols / kQuantBlock),
                               cols, out.data<float>() + r * cols);
    else
      cpu::dequantize_row_q4_0(codes + r * (cols / 2), scales + r * (cols / kQuantBlock), cols,
                               out.data<float>() + r * cols);
  }
  });
  return out;
}

Tensor quantized_linear(const Tensor& x, const QuantizedTensor& w, const Tensor& bias) {
  constexpr const char* op = "quantized_linear";
  check_quantized(op, "weight", w);
  KILN_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == w.cols(), op,
             "input {} must end in in_features {} (weight {} {})", x.defined() ? to_string(x.shape()) : "undefined",
             w.cols(), quant_type_name(w.type), to_string(w.shape));
  KILN_CHECK(x.device() == kCPU, op, "input must be on the CPU, got {}", x.device().str());
  KILN_CHECK(is_floating(x.dtype()), op, "input must be floating, got {}", kiln::name(x.dtype()));
  KILN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w.rows()), op,
             "bias {} must be [{}]", bias.defined() ? to_string(bias.shape()) : "", w.rows());
  Tensor xc = x.detach().to(kF32).contiguous();
  int64_t batch = xc.numel() / w.cols();
  // Many rows at once (a prompt, an evaluation batch): the f32 GEMM on the
  // dequantized matrix (its cost amortised over the rows) beats the integer
  // kernels, which redo their dot products per row of x.
  if (batch >= kDequantizeBatch) {
    Tensor b = bias.defined() ? bias.detach().to(kF32).contiguous() : Tensor();
    return linear(xc, dequantize(w), b);
  }
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = w.rows();
  Tensor y = Tensor::empty(out_shape, kF32);
  const auto* codes = static_cast<const uint8_t*>(w.codes.data_ptr());
  if (w.type == QuantType::q8_0)
    cpu::q8_0_matmul(reinterpret_cast<const int8_t*>(codes), w.scales.data<float>(), w.rows(), w.cols(),
                     xc.data<float>(), batch, y.data<float>());
  else
    cpu::q4_0_matmul(codes, w.scales.data<float>(), w.rows(), w.cols(), xc.data<float>(), batch, y.data<float>());
  if (bias.defined()) {
    Tensor b = bias.detach().to(kF32).contiguous();
    float* yp = y.data<float>();
    const float* bp = b.data<float>();
    for (int64_t i = 0; i < batch; ++i)
      for (int64_t r = 0; r < w.rows(); ++r) yp[i * w.rows() + r] += bp[r];
  }
  return y;
}

QuantizedLinear::QuantizedLinear(QuantizedTensor w, Tensor b)
    : weight(std::move(w)), bias(std::move(b)), in_features(0), out_features(0) {
  check_quantized("QuantizedLinear", "weight", weight);
  in_features = weight.cols();
  out_features = weight.rows();
  KILN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == out_features), "QuantizedLinear",
             "bias {} must be [{}]", bias.defined() ? to_string(bias.shape()) : "", out_features);
  // Buffers, so the state dict and load_state_dict see them (no gradients: inference only).
  weight.codes = register_buffer("weight_codes", weight.codes);
  weight.scales = register_buffer("weight_scales", weight.scales);
  if (bias.defined()) bias = register_buffer("bias", bias.detach().to(kF32).contiguous());
}

QuantizedLinear QuantizedLinear::from_linear(const Linear& linear, QuantType type) {
  return QuantizedLinear(quantize(linear.weight.value(), type),
                         linear.bias.defined() ? linear.bias.value().detach().to(kF32).contiguous() : Tensor());
}

Tensor QuantizedLinear::forward(const Tensor& x) const { return quantized_linear(x, weight, bias); }

std::string QuantizedLinear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}, type={}", in_features, out_features, bias.defined(),
                     quant_type_name(weight.type));
}

bool is_released(const Tensor& weight) {
  return weight.defined() && weight.dim() == 2 && weight.numel() > 1 && weight.stride(0) == 0 &&
         weight.stride(1) == 0;
}

namespace {

// One matrix quantize() reaches: its state-dict name, the f32 weight, the
// slot of its quantized copy, and the module that owns the slot.
struct QuantSlot {
  std::string name;
  Parameter weight;
  std::shared_ptr<const QuantizedTensor>* quantized;
  const Module* owner;
};

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::vector<QuantSlot> quant_slots(Module& module) {
  std::vector<QuantSlot> slots;
  for (auto& [path, m] : module.named_modules()) {
    if (auto* linear = dynamic_cast<Linear*>(m)) {
      slots.push_back({join(path, "weight"), linear->weight, &linear->quantized, m});
    } else if (auto* mha = dynamic_cast<MultiheadAttention*>(m)) {
      if (mha->in_proj_weight.defined())
        slots.push_back({join(path, "in_proj_weight"), mha->in_proj_weight, &mha->in_proj_quantized, m});
    } else if (auto* qw = dynamic_cast<QuantizableWeight*>(m)) {
      slots.push_back({join(path, qw->quantizable_name()), qw->quantizable_weight(), &qw->quantized_weight(), m});
    }
  }
  return slots;
}

// NOTE [Released weights]: an f32 weight whose layer multiplies by its
// quantized copy is freed only when no other module reads it (a GPT's tied
// wte is the Embedding's table as well as the lm_head's weight), by pointing
// the tensor at a single zero with stride 0 (its shape kept, so the module's
// structure and state-dict keys are unchanged). The layers refuse a forward
// with grad mode on through it (is_released).
void release_unshared(Module& module, const std::vector<QuantSlot>& slots) {
  std::map<const void*, bool> quantized_only;  // parameter -> every owner reads the quantized copy
  for (const QuantSlot& s : slots) {
    auto [it, fresh] = quantized_only.try_emplace(s.weight.id(), true);
    it->second = it->second && *s.quantized != nullptr;
  }
  for (auto& [path, m] : module.named_modules())
    for (auto& [name, p] : m->named_parameters(/*recurse=*/false)) {
      auto it = quantized_only.find(p.id());
      if (it == quantized_only.end()) continue;
      bool owner = false;
      for (const QuantSlot& s : slots) owner = owner || (s.owner == m && s.weight.is_same(p));
      if (!owner) it->second = false;  // read by a layer that is not quantized (an embedding)
    }
  auto zero = std::make_shared<Storage>(sizeof(float), kCPU);
  *static_cast<float*>(zero->data()) = 0.0f;
  for (const QuantSlot& s : slots) {
    const Tensor& w = s.weight.value();
    if (!quantized_only[s.weight.id()] || is_released(w) || w.dtype() != kF32) continue;
    TensorImpl& d = *w.impl();
    d.storage = zero;
    for (size_t k = 0; k < d.strides.size(); ++k) d.strides[k] = 0;
    d.offset = 0;
    d.is_view = true;
    if (d.autograd) d.autograd->grad.reset();
  }
}

}  // namespace

int64_t quantize(Module& module, QuantType type, const QuantizeOptions& options) {
  std::vector<QuantSlot> slots = quant_slots(module);
  // Quantize first (a released weight cannot be quantized again), then attach.
  std::vector<std::shared_ptr<const QuantizedTensor>> made(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    const Tensor& w = slots[i].weight.value();
    if (w.dim() != 2 || w.size(1) % kQuantBlock != 0) continue;
    KILN_CHECK(!is_released(w), "quantize", "{}: its f32 weight was released (release_float_weights); it cannot be "
               "quantized again", slots[i].name);
    made[i] = std::make_shared<const QuantizedTensor>(quantize(w, type));
  }
  int64_t n = 0;
  for (size_t i = 0; i < slots.size(); ++i)
    if (made[i]) {
      *slots[i].quantized = made[i];
      ++n;
    }
  if (options.release_float_weights) release_unshared(module, slots);
  return n;
}

int64_t attach_quantized(Module& module,
                         const std::map<std::string, std::shared_ptr<const QuantizedTensor>>& weights,
                         const QuantizeOptions& options) {
  std::vector<QuantSlot> slots = quant_slots(module);
  std::vector<std::pair<std::shared_ptr<const QuantizedTensor>*, std::shared_ptr<const QuantizedTensor>>> plan;
  for (const QuantSlot& s : slots) {
    auto it = weights.find(s.name);
    if (it == weights.end()) continue;
    KILN_CHECK(it->second, "attach_quantized", "{}: null quantized tensor", s.name);
    check_quantized("attach_quantized", s.name, *it->second);
    KILN_CHECK(it->second->shape == s.weight.shape(), "attach_quantized", "{}: quantized {} but the weight is {}",
               s.name, to_string(it->second->shape), to_string(s.weight.shape()));
    plan.emplace_back(s.quantized, it->second);
  }
  for (auto& [slot, q] : plan) *slot = q;
  if (options.release_float_weights) release_unshared(module, slots);
  return int64_t(plan.size());
}

}  // namespace kiln::nn
