// Model translators: plan, check, then load (include/kiln/io/translate.h).
#include "kiln/io/translate.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "kiln/core/error.h"
#include "kiln/ops/index.h"
#include "kiln/ops/shape.h"

namespace kiln::io {
namespace {

std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t dot = s.find('.', start);
    out.push_back(s.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return out;
    start = dot + 1;
  }
}

bool is_placeholder(const std::string& c) { return c.size() >= 2 && c.front() == '{' && c.back() == '}'; }

/// Whether `name` matches `pattern` component by component; fills captures.
bool match(const std::string& pattern, const std::string& name, std::map<std::string, std::string>& captures) {
  auto p = split_dots(pattern), n = split_dots(name);
  if (p.size() != n.size()) return false;
  std::map<std::string, std::string> got;
  for (size_t i = 0; i < p.size(); ++i) {
    if (is_placeholder(p[i])) {
      auto [it, fresh] = got.emplace(p[i], n[i]);
      if (!fresh && it->second != n[i]) return false;
    } else if (p[i] != n[i]) {
      return false;
    }
  }
  captures = std::move(got);
  return true;
}

std::string substitute(const std::string& pattern, const std::map<std::string, std::string>& captures) {
  std::string out;
  for (const std::string& c : split_dots(pattern)) {
    if (!out.empty()) out += '.';
    auto it = is_placeholder(c) ? captures.find(c) : captures.end();
    out += it != captures.end() ? it->second : c;
  }
  return out;
}

bool floating_file_dtype(const std::string& d) { return d == "F32" || d == "F16" || d == "BF16" || d == "F64"; }

const char* kind_name(TransformKind k) {
  switch (k) {
    case TransformKind::identity:
      return "Identity";
    case TransformKind::transpose2d:
      return "Transpose2D";
    case TransformKind::concat:
      return "Concat";
    case TransformKind::slice:
      return "Slice";
  }
  return "?";
}

struct Planned {
  std::string target;
  const TranslateRule* rule;
  std::vector<std::string> sources;
  DType dtype;
};

struct Plan {
  TranslateReport report;
  std::vector<Planned> items;
};

std::string list(const std::vector<std::string>& v) {
  if (v.empty()) return "-";
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

Plan make_plan(const WeightSource& src, const nn::Module& model, const TranslateMap& map,
               const TranslateOptions& options) {
  Plan plan;
  plan.report.source_format = src.format();
  std::vector<std::string> problems;
  std::set<std::string> used;
  nn::StateDict sd = model.state_dict();
  for (const auto& [target, value] : sd) {
    const TranslateRule* rule = nullptr;
    std::map<std::string, std::string> captures;
    for (const TranslateRule& r : map.rules)
      if (match(r.target, target, captures)) {
        rule = &r;
        break;
      }
    if (!rule) {
      plan.report.missing.push_back(target);
      continue;
    }
    Planned p{target, rule, {}, value.dtype()};
    std::vector<Shape> shapes;
    bool ok = true;
    for (const std::string& pattern : rule->sources) {
      std::string name = substitute(pattern, captures);
      p.sources.push_back(name);
      if (!src.contains(name)) {
        problems.push_back(fmt::format("'{}' needs source '{}', which the file lacks", target, name));
        ok = false;
        continue;
      }
      used.insert(name);
      const WeightInfo& info = src.info(name);
      if (!floating_file_dtype(info.dtype) && is_floating(value.dtype())) {
        problems.push_back(fmt::format("'{}': source '{}' is {}, not a floating type kiln converts (F32, F16, BF16, F64){}",
                                       target, name, info.dtype,
                                       info.dtype == "Q8_0" || info.dtype == "Q4_0" ? "; dequantize it first" : ""));
        ok = false;
      }
      shapes.push_back(info.shape);
    }
    if (!ok) continue;
    // The shape the transform gives, from the file's header alone.
    Shape got;
    std::string why;
    switch (rule->kind) {
      case TransformKind::identity:
        if (shapes.size() != 1) why = "Identity takes one source";
        else got = shapes[0];
        break;
      case TransformKind::transpose2d:
        if (shapes.size() != 1 || shapes[0].size() != 2) why = "Transpose2D takes one 2-D source";
        else got = Shape{shapes[0][1], shapes[0][0]};
        break;
      case TransformKind::concat: {
        if (shapes.empty()) {
          why = "Concat needs sources";
          break;
        }
        int64_t d = rule->dim;
        got = shapes[0];
        if (d < 0 || d >= int64_t(got.size())) {
          why = fmt::format("Concat dim {} is out of range for {}", d, to_string(got));
          break;
        }
        for (size_t i = 1; i < shapes.size() && why.empty(); ++i) {
          bool same = shapes[i].size() == got.size();
          for (size_t k = 0; same && k < got.size(); ++k) same = int64_t(k) == d || shapes[i][k] == got[k];
          if (!same) why = fmt::format("Concat along dim {} of {} and {}", d, to_string(shapes[0]), to_string(shapes[i]));
          else got[size_t(d)] += shapes[i][size_t(d)];
        }
        break;
      }
      case TransformKind::slice: {
        int64_t d = rule->dim;
        if (shapes.size() != 1 || d < 0 || d >= int64_t(shapes[0].size())) {
          why = "Slice takes one source with dim in range";
          break;
        }
        got = shapes[0];
        if (rule->begin < 0 || rule->begin >= rule->end || rule->end > got[size_t(d)]) {
          why = fmt::format("Slice [{}, {}) of dim {} of size {}", rule->begin, rule->end, d, got[size_t(d)]);
          break;
        }
        got[size_t(d)] = rule->end - rule->begin;
        break;
      }
    }
    if (!why.empty()) {
      problems.push_back(fmt::format("'{}': {}", target, why));
      continue;
    }
    if (got != value.shape()) {
      problems.push_back(fmt::format("'{}' is {} in the model, but {} of {} gives {}", target, to_string(value.shape()),
                                     kind_name(rule->kind), list(p.sources), to_string(got)));
      continue;
    }
    plan.report.loaded.push_back(target);
    plan.items.push_back(std::move(p));
  }
  for (const std::string& name : src.names()) {
    if (used.count(name)) continue;
    std::map<std::string, std::string> captures;
    bool ignored = std::any_of(map.ignore.begin(), map.ignore.end(),
                               [&](const std::string& pattern) { return match(pattern, name, captures); });
    if (!ignored) plan.report.unmapped.push_back(name);
  }
  if (!plan.report.missing.empty() && !options.allow_missing)
    problems.push_back(fmt::format("no rule or source for the model's {}", list(plan.report.missing)));
  if (!plan.report.unmapped.empty() && !options.allow_unmapped)
    problems.push_back(fmt::format("the file's {} match no rule (TranslateOptions::allow_unmapped to skip them)",
                                   list(plan.report.unmapped)));
  if (!problems.empty()) {
    std::string msg = fmt::format("{}: {} problem(s), nothing loaded:", map.name, problems.size());
    for (const auto& p : problems) msg += "\n  " + p;
    throw Error("translate", msg);
  }
  return plan;
}

}  // namespace

std::string TranslateReport::summary() const {
  return fmt::format("loaded {} tensors from {}; unmapped: {}; missing: {}", loaded.size(), source_format,
                     list(unmapped), list(missing));
}

TranslateReport check_translate(const WeightSource& source, const nn::Module& model, const TranslateMap& map,
                                const TranslateOptions& options) {
  return make_plan(source, model, map, options).report;
}

TranslateReport translate(const WeightSource& source, nn::Module& model, const TranslateMap& map,
                          const TranslateOptions& options) {
  Plan plan = make_plan(source, model, map, options);
  nn::StateDict out;
  for (const Planned& p : plan.items) {
    std::vector<Tensor> xs;
    for (const std::string& name : p.sources) xs.push_back(source.load(name));
    Tensor t;
    switch (p.rule->kind) {
      case TransformKind::identity:
        t = xs[0];
        break;
      case TransformKind::transpose2d:
        t = xs[0].transpose(0, 1);
        break;
      case TransformKind::concat:
        t = cat(xs, p.rule->dim);
        break;
      case TransformKind::slice:
        t = xs[0].slice(p.rule->dim, p.rule->begin, p.rule->end);
        break;
    }
    // A copy in the model's dtype: the source may alias a read-only mapping.
    out.insert(p.target, t.to(p.dtype).contiguous());
  }
  nn::LoadOptions lo;
  lo.strict = !options.allow_missing;
  model.load_state_dict(out, lo);  // checks every key again, then copies (all or nothing)
  return plan.report;
}

namespace {
/// The per-block rules of kiln's GPT from a layout whose block prefix is
/// `h` ("transformer.h.{i}." or "h.{i}.") and whose matmul weights need `w`.
void add_block_rules(TranslateMap& m, const std::string& h, TransformKind w) {
  const std::string k = "transformer.h.{i}.";
  auto rule = [&](const std::string& target, const std::string& source, TransformKind kind = TransformKind::identity) {
    m.rules.push_back({k + target, {h + source}, kind});
  };
  for (const char* p : {"weight", "bias"}) {
    std::string s = p;
    rule("norm1." + s, "ln_1." + s);
    rule("norm2." + s, "ln_2." + s);
  }
  rule("self_attn.in_proj_weight", "attn.c_attn.weight", w);
  rule("self_attn.in_proj_bias", "attn.c_attn.bias");
  rule("self_attn.out_proj.weight", "attn.c_proj.weight", w);
  rule("self_attn.out_proj.bias", "attn.c_proj.bias");
  rule("linear1.weight", "mlp.c_fc.weight", w);
  rule("linear1.bias", "mlp.c_fc.bias");
  rule("linear2.weight", "mlp.c_proj.weight", w);
  rule("linear2.bias", "mlp.c_proj.bias");
}
}  // namespace

TranslateMap nanogpt_to_gpt() {
  TranslateMap m;
  m.name = "nanogpt_to_gpt";
  for (const char* n : {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
                        "transformer.ln_f.bias", "lm_head.weight"})
    m.rules.push_back({n, {n}});
  add_block_rules(m, "transformer.h.{i}.", TransformKind::identity);
  m.ignore = {"transformer.h.{i}.attn.bias"};  // the causal mask buffer of nanoGPT without flash attention
  return m;
}

TranslateMap gpt2_to_gpt() {
  TranslateMap m;
  m.name = "gpt2_to_gpt";
  m.rules = {{"transformer.wte.weight", {"wte.weight"}},
             {"transformer.wpe.weight", {"wpe.weight"}},
             {"transformer.ln_f.weight", {"ln_f.weight"}},
             {"transformer.ln_f.bias", {"ln_f.bias"}},
             {"lm_head.weight", {"wte.weight"}}};  // tied
  add_block_rules(m, "h.{i}.", TransformKind::transpose2d);  // Conv1D keeps [in, out]
  m.ignore = {"h.{i}.attn.bias", "h.{i}.attn.masked_bias"};
  return m;
}

TranslateMap identity_map() {
  TranslateMap m;
  m.name = "identity";
  // One rule per depth: "{a}", "{a}.{b}", ... each component kept.
  std::string pattern;
  for (int depth = 0; depth < 12; ++depth) {
    pattern += (depth ? "." : "") + fmt::format("{{c{}}}", depth);
    m.rules.push_back({pattern, {pattern}});
  }
  return m;
}

}  // namespace kiln::io
