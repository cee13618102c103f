// Checkpoint: what the file holds, round trips of every part, loads that fail
// (damaged files, mismatched objects) leaving every object as it was, plain
// weight files, two models in one file, and CRC32C.
#include "kiln/io/checkpoint.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "kiln/core/crc32c.h"
#include "tests/support/io_testing.h"

namespace kiln::io {
namespace {
using testing::equal;
using testing::read_bytes;
using testing::write_bytes;
namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  std::string dir = (kiln::testing::scratch_root() / "kiln_checkpoint_test").string();
  fs::create_directories(dir);
  return dir + "/" + name;
}

struct Net : nn::Module {
  nn::Shared<nn::Linear> fc1, fc2;
  nn::Shared<nn::Dropout> drop;
  explicit Net(const nn::Init& init, int64_t hidden = 5)
      : fc1(register_module("fc1", nn::Linear(4, hidden, init))),
        fc2(register_module("fc2", nn::Linear(hidden, 2, init))),
        drop(register_module("drop", nn::Dropout(0.5, init))) {}
  Tensor forward(const Tensor& x) { return fc2(drop(relu(fc1(x)))); }
};

/// A counter with a checked load, standing in for a callback's state.
struct Counter : Stateful {
  int64_t value = 0;
  State state() const override { return {{"value", std::to_string(value)}}; }
  void load_state(const State& s) override {
    int64_t v = state_i64(s, "value", "Counter");
    KILN_CHECK(v >= 0, "Counter", "value is negative ({})", v);
    value = v;
  }
};

/// A model, optimizer, scheduler, streams, progress and a state, trained a
/// few steps so that every part has non-trivial state.
struct Trained {
  Rngs rngs;
  nn::Shared<Net> net;
  optim::AdamW opt;
  optim::CosineScheduler sched{{.max_lr = 0.01, .min_lr = 0.001, .total_steps = 10}};
  Progress progress;
  Counter counter;
  Checkpoint ckpt;

  explicit Trained(uint64_t seed = 0, int steps = 3)
      : rngs{{"params", seed}, {"dropout", 1}}, net(nn::make<Net>(rngs)), opt(net->parameters(), {.lr = 0.01}) {
    ckpt.model(*net).optimizer(opt).scheduler(sched).rngs(rngs).progress(progress).state("counter", counter);
    Generator data(seed + 100);
    for (int i = 0; i < steps; ++i) {
      Tensor loss = sum(pow(net(randn({3, 4}, data)), 2));
      loss.backward();
      opt.step();
      sched.step(opt);
      opt.zero_grad();
      rngs.next("dropout");
      ++progress.global_step;
      ++counter.value;
    }
  }
};

/// Everything `a` and `b` can differ in.
void expect_same_state(Trained& a, Trained& b) {
  nn::StateDict sa = a.net->state_dict(), sb = b.net->state_dict();
  for (const auto& [k, v] : sa) EXPECT_TRUE(equal(v, sb.at(k))) << k;
  nn::StateDict oa = a.opt.state_dict(), ob = b.opt.state_dict();
  ASSERT_EQ(oa.keys(), ob.keys());
  for (const auto& [k, v] : oa) EXPECT_TRUE(equal(v, ob.at(k))) << k;
  EXPECT_EQ(a.sched.state_dict(), b.sched.state_dict());
  EXPECT_EQ(a.rngs.state(), b.rngs.state());
  EXPECT_EQ(a.net->drop->generator().state(), b.net->drop->generator().state());
  EXPECT_EQ(a.progress, b.progress);
  EXPECT_EQ(a.counter.value, b.counter.value);
}

TEST(Checkpoint, RestoresEveryPartExactly) {
  std::string path = temp_path("round_trip.safetensors");
  Trained a(0, 3);
  a.net->drop->forward(ones({2, 4}));  // advances the dropout generator
  a.ckpt.config(R"({"hidden": 5})").save(path);

  Trained b(42, 1);  // other weights, other state everywhere
  b.ckpt.load(path);
  expect_same_state(a, b);
  EXPECT_EQ(b.opt.step_count(), 3);
  // Training on from both gives the same next step.
  Generator data(7);
  Tensor x = randn({3, 4}, data);
  for (Trained* r : {&a, &b}) {
    sum(r->net(x)).backward();
    r->opt.step();
  }
  expect_same_state(a, b);
}

TEST(Checkpoint, FileHoldsTorchNamedWeightsOptimizerStateAndMetadata) {
  std::string path = temp_path("layout.safetensors");
  Trained a;
  a.ckpt.config(R"({"hidden": 5})").save(path);
  nn::StateDict tensors = load_safetensors(path);
  EXPECT_TRUE(tensors.contains("fc1.weight"));
  EXPECT_TRUE(tensors.contains("optim.step"));
  EXPECT_TRUE(tensors.contains("optim.fc1.weight.exp_avg"));
  EXPECT_TRUE(tensors.contains("optim.param_groups.0.lr"));
  EXPECT_TRUE(equal(tensors.at("fc2.bias"), a.net->fc2->bias.value()));

  CheckpointInfo info = read_checkpoint_info(path);
  EXPECT_EQ(info.format_version, 2);
  EXPECT_EQ(info.metadata.at("kiln.header_crc32c").size(), 8u);
  EXPECT_EQ(info.config, R"({"hidden": 5})");
  EXPECT_EQ(info.progress.global_step, 3);
  EXPECT_EQ(info.models, std::vector<std::string>{""});
  EXPECT_EQ(info.optimizers, std::vector<std::string>{"optim"});
  EXPECT_EQ(info.metadata.at("format"), "pt");
  auto gens = nlohmann::json::parse(info.metadata.at("kiln.generators"));
  EXPECT_EQ(gens["drop.generator"]["offset"].get<uint64_t>(), a.net->drop->generator().offset());
  EXPECT_EQ(info.tensors.size(), tensors.size());
  // The checksum of each tensor is the CRC32C of its bytes.
  auto crc = nlohmann::json::parse(info.metadata.at("kiln.crc32c"));
  const Tensor& w = a.net->fc1->weight.value();
  EXPECT_EQ(crc["fc1.weight"].get<std::string>(), fmt::format("{:08x}", crc32c(w.data_ptr(), size_t(w.nbytes()))));
}

TEST(Checkpoint, NonFiniteSchedulerStateRoundTrips) {
  std::string path = temp_path("plateau.safetensors");
  Rngs rngs(0);
  nn::Linear fc(2, 2, rngs);
  optim::SGD opt(fc.parameters(), {.lr = 0.1});
  optim::ReduceOnPlateauScheduler a({.lr = 0.1});  // best starts at +inf
  ASSERT_TRUE(std::isinf(a.best()));
  Checkpoint().model(fc).scheduler(a).save(path);
  optim::ReduceOnPlateauScheduler b({.lr = 0.1});
  b.step(0.5, opt);
  Checkpoint().model(fc).scheduler(b).load(path);
  EXPECT_TRUE(std::isinf(b.best()));
  EXPECT_EQ(b.state_dict(), a.state_dict());
}

TEST(Checkpoint, PlainWeightsFileLoadsIntoAModelOnly) {
  std::string path = temp_path("plain.safetensors");
  Trained a;
  save_safetensors(path, a.net->state_dict());  // as any tool writes weights
  Trained b(42);
  Checkpoint weights;
  weights.model(*b.net).load(path);
  for (const auto& [k, v] : a.net->state_dict()) EXPECT_TRUE(equal(v, b.net->state_dict().at(k))) << k;
  EXPECT_EQ(read_checkpoint_info(path).format_version, 0);
  // A full checkpoint cannot come from it.
  Trained c(43);
  auto before = c.net->state_dict();
  EXPECT_KILN_ERROR(c.ckpt.load(path), "a plain safetensors file (no kiln metadata) holds only weights");
  EXPECT_TRUE(equal(c.net->state_dict().at("fc1.weight"), before.at("fc1.weight")));
  // And a full checkpoint loads into a model alone (for inference).
  std::string full = temp_path("full.safetensors");
  a.ckpt.save(full);
  Trained d(44);
  Checkpoint().model(*d.net).load(full);
  EXPECT_TRUE(equal(d.net->state_dict().at("fc1.weight"), a.net->state_dict().at("fc1.weight")));
}

/// Loading `path` into a fresh Trained fails with `message` and changes nothing.
void expect_load_fails_untouched(const std::string& path, const std::string& message) {
  Trained r(42, 2);
  Trained same(42, 2);
  EXPECT_KILN_ERROR(r.ckpt.load(path), message);
  expect_same_state(r, same);
}

TEST(Checkpoint, DamagedFilesFailNamingTheProblemAndChangeNothing) {
  std::string path = temp_path("good.safetensors"), bad = temp_path("bad.safetensors");
  Trained a;
  a.ckpt.save(path);
  std::string bytes = read_bytes(path);

  // A flipped bit in a tensor's data: its checksum names it.
  std::string flipped = bytes;
  flipped[flipped.size() - 3] ^= 0x10;
  write_bytes(bad, flipped);
  expect_load_fails_untouched(bad, "checksum mismatch");
  EXPECT_KILN_ERROR(read_checkpoint_info(bad), "the file is damaged");

  // Truncated: the header's ranges no longer fit.
  write_bytes(bad, bytes.substr(0, bytes.size() - 10));
  expect_load_fails_untouched(bad, "beyond the data buffer");

  // Metadata edited into nonsense (same length, so the header stays valid JSON).
  std::string edited = bytes;
  size_t at = edited.find("global_step");
  ASSERT_NE(at, std::string::npos);
  edited.replace(at, 11, "global_stap");
  write_bytes(bad, edited);
  expect_load_fails_untouched(bad, "metadata 'kiln.progress': progress has no \"global_step\"");

  // A checksum that does not parse.
  edited = bytes;
  at = edited.find("kiln.crc32c");
  ASSERT_NE(at, std::string::npos);
  at = edited.find("fc1.weight", at);
  at = edited.find(':', at) + 3;  // past :\"  (the metadata value is JSON in a JSON string)
  edited[at] = 'z';
  write_bytes(bad, edited);
  expect_load_fails_untouched(bad, "is not 8 hex digits");

  EXPECT_KILN_ERROR(Trained{}.ckpt.load(temp_path("missing.safetensors")), "cannot open");
}

// Issue 23, item 6: the metadata had no checksum; 74 of 545 one-digit edits
// were accepted and changed the resumed run ("epoch":0 -> 1 skipped an epoch).
TEST(Checkpoint, OneDigitEditsOfTheHeaderAreRefused) {
  std::string path = temp_path("digits.safetensors"), bad = temp_path("digits_bad.safetensors");
  Trained a;
  a.ckpt.save(path);
  const std::string bytes = read_bytes(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  const size_t header_end = 8 + size_t(header_len);

  // The probe of the issue: progress' epoch 0 -> 1.
  std::string edited = bytes;
  size_t at = edited.find("\\\"epoch\\\":0");
  ASSERT_NE(at, std::string::npos) << edited.substr(0, header_end);
  edited[at + 10] = '1';
  write_bytes(bad, edited);
  expect_load_fails_untouched(bad, "header checksum mismatch");
  EXPECT_KILN_ERROR(read_checkpoint_info(bad), "its metadata or tensor list was edited or damaged");
  EXPECT_EQ(read_bytes(bad), edited);  // refused, not repaired

  // Every digit of the header, changed to the next one: each load is refused
  // (the header checksum, or an earlier check), and the objects are untouched.
  int edits = 0;
  Trained r(42, 2), same(42, 2);
  for (size_t i = 8; i < header_end; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(bytes[i]))) continue;
    edited = bytes;
    edited[i] = char('0' + (bytes[i] - '0' + 1) % 10);
    write_bytes(bad, edited);
    bool refused = false;
    try {
      r.ckpt.load(bad);
    } catch (const Error&) {
      refused = true;
    }
    EXPECT_TRUE(refused) << "digit at " << i << " accepted: ..." << bytes.substr(std::max<size_t>(i, 40) - 40, 80);
    ++edits;
  }
  EXPECT_GT(edits, 100);
  expect_same_state(r, same);

  // A version-2 file relabelled version 1 still carries the header checksum.
  edited = bytes;
  at = edited.find("kiln.format_version\":\"2\"");
  ASSERT_NE(at, std::string::npos);
  edited[at + 22] = '1';
  write_bytes(bad, edited);
  expect_load_fails_untouched(bad, "version 1 has no 'kiln.header_crc32c', yet the file has one: it was edited");
}

TEST(Checkpoint, MismatchedObjectsFailNamingThePartAndChangeNothing) {
  std::string path = temp_path("mismatch.safetensors");
  Trained a;
  a.ckpt.save(path);

  {  // A model of another shape.
    Rngs rngs(1);
    Net wide(rngs, 6);
    optim::AdamW opt(wide.parameters());
    auto before = wide.state_dict();
    Checkpoint c;
    c.model(wide).optimizer(opt);
    EXPECT_KILN_ERROR(c.load(path), "model '': [load_state_dict] kiln::io::Net not loaded");
    EXPECT_TRUE(equal(wide.state_dict().at("fc1.weight"), before.at("fc1.weight")));
    EXPECT_EQ(opt.step_count(), 0);
  }
  {  // Another optimizer kind.
    Trained r(42);
    optim::SGD sgd(r.net->parameters(), {.lr = 0.1});
    auto before = r.net->state_dict();
    EXPECT_KILN_ERROR(Checkpoint().model(*r.net).optimizer(sgd).load(path),
                      "optimizer 'optim': the file holds the state of AdamW, not of SGD");
    EXPECT_TRUE(equal(r.net->state_dict().at("fc1.weight"), before.at("fc1.weight")));
  }
  {  // A part the file does not have.
    Trained r(42);
    Counter extra;
    r.ckpt.state("extra", extra);
    Trained same(42);
    EXPECT_KILN_ERROR(r.ckpt.load(path), "state 'extra': not in the file");
    expect_same_state(r, same);
  }
  {  // A model without the dropout the file has a generator for.
    Rngs rngs(0);
    nn::Sequential plain(nn::Linear(4, 5, rngs));
    EXPECT_KILN_ERROR(Checkpoint().model(plain, "x").load(path), "model 'x': not in the file");
  }
}

TEST(Checkpoint, AStateThatRefusesRollsBackTheOnesAlreadyRestored) {
  std::string path = temp_path("rollback.safetensors");
  Trained a(0, 3);
  Counter second;
  second.value = 5;
  a.ckpt.state("second", second);
  a.ckpt.save(path);
  // The second state's own load refuses the saved value, after the scheduler
  // and the first counter were restored. (The file cannot be edited into a
  // value Counter refuses: the header checksum refuses any edit first.)
  struct Refuser : Stateful {
    State state() const override { return {}; }
    void load_state(const State& s) override {
      KILN_CHECK(s.at("value") != "5", "Refuser", "state 'value' is '{}', which this object refuses", s.at("value"));
    }
  };

  Trained r(42, 1);
  Refuser r_second;
  r.ckpt.state("second", r_second);
  Trained same(42, 1);
  EXPECT_KILN_ERROR(r.ckpt.load(path), "state 'second': [Refuser] state 'value' is '5', which this object refuses");
  expect_same_state(r, same);
}

TEST(Checkpoint, TwoModelsAndTwoOptimizersUnderTheirPrefixes) {
  std::string path = temp_path("gan.safetensors");
  Rngs rngs{{"params", 0}, {"dropout", 1}};
  Net g(rngs), d(rngs);
  optim::Adam g_opt(g.parameters()), d_opt(d.parameters());
  for (auto* opt : {&g_opt, &d_opt}) opt->set("lr", 0.5);
  Checkpoint ckpt;
  ckpt.model(g, "generator").model(d, "discriminator").optimizer(g_opt, "g_optim").optimizer(d_opt, "d_optim");
  ckpt.save(path);
  auto keys = load_safetensors(path).keys();
  EXPECT_NE(std::find(keys.begin(), keys.end(), "generator.fc1.weight"), keys.end());
  EXPECT_NE(std::find(keys.begin(), keys.end(), "d_optim.param_groups.0.lr"), keys.end());

  Rngs other{{"params", 9}, {"dropout", 9}};
  Net g2(other), d2(other);
  optim::Adam g2_opt(g2.parameters()), d2_opt(d2.parameters());
  Checkpoint back;
  back.model(g2, "generator").model(d2, "discriminator").optimizer(g2_opt, "g_optim").optimizer(d2_opt, "d_optim");
  back.load(path);
  EXPECT_TRUE(equal(g2.fc1->weight.value(), g.fc1->weight.value()));
  EXPECT_TRUE(equal(d2.fc2->bias.value(), d.fc2->bias.value()));
  EXPECT_EQ(g2_opt.get("lr"), 0.5);
  EXPECT_EQ(d2.drop->generator().state(), d.drop->generator().state());
}

TEST(Checkpoint, RegistrationErrors) {
  Rngs rngs(0);
  nn::Linear fc(2, 2, rngs);
  optim::SGD opt(fc.parameters(), {.lr = 0.1});
  Checkpoint c;
  c.model(fc);
  EXPECT_KILN_ERROR(c.model(fc), "prefix '' is already taken");
  EXPECT_KILN_ERROR(c.optimizer(opt, ""), "an optimizer needs a non-empty prefix");
  EXPECT_KILN_ERROR(c.config("{not json"), "config is not valid JSON");
  Counter counter;
  c.state("n", counter);
  EXPECT_KILN_ERROR(c.state("n", counter), "two states named 'n'");

  // A model whose child is named like the optimizer's prefix.
  struct Clash : nn::Module {
    nn::Shared<nn::Linear> optim;
    explicit Clash(Rngs& rngs) : optim(register_module("optim", nn::Linear(1, 1, rngs))) {}
  } clash(rngs);
  optim::SGD clash_opt(clash.parameters(), {.lr = 0.1});
  EXPECT_KILN_ERROR(Checkpoint().model(clash).optimizer(clash_opt).save(temp_path("clash.safetensors")),
                    "tensor 'optim.weight' of model '' starts with another part's prefix");
  EXPECT_KILN_ERROR(Checkpoint().model(fc, "a").optimizer(opt, "a.b"), "prefix 'a.b' nests with prefix 'a'");
}

TEST(Checkpoint, StateValuesParseStrictly) {
  State s{{"n", "12"}, {"big", "18446744073709551615"}, {"x", "0.1"}, {"inf", "inf"}, {"bad", "12a"}};
  EXPECT_EQ(state_i64(s, "n", "op"), 12);
  EXPECT_EQ(state_u64(s, "big", "op"), UINT64_MAX);
  EXPECT_EQ(state_f64(s, "x", "op"), 0.1);
  EXPECT_EQ(state_f64(s, "inf", "op"), INFINITY);
  EXPECT_KILN_ERROR(state_i64(s, "bad", "op"), "[op] state 'bad' is '12a', not an integer");
  EXPECT_KILN_ERROR(state_u64(s, "missing", "op"), "[op] state has no 'missing'");
  EXPECT_KILN_ERROR(state_u64(State{{"n", "-1"}}, "n", "op"), "not a non-negative integer");
}

TEST(Checkpoint, LargeFilesLoadThroughAMapping) {
  std::string path = temp_path("large.safetensors");
  Rngs rngs(0);
  nn::Linear big(1024, 512, rngs);  // 2 MiB of weights: above the mapping threshold
  optim::AdamW opt(big.parameters());
  sum(big.forward(ones({1, 1024}))).backward();
  opt.step();
  Checkpoint().model(big).optimizer(opt).save(path);
  ASSERT_GE(fs::file_size(path), size_t(4) << 20);
  Rngs other(5);
  nn::Linear back(1024, 512, other);
  optim::AdamW back_opt(back.parameters());
  Checkpoint().model(back).optimizer(back_opt).load(path);
  EXPECT_TRUE(equal(back.weight.value(), big.weight.value()));
  EXPECT_TRUE(equal(back.weight.state("exp_avg_sq"), big.weight.state("exp_avg_sq")));
}

}  // namespace
}  // namespace kiln::io
