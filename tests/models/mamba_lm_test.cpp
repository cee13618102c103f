// models::MambaBackbone / MambaLM (kiln/models/mamba_lm.h): the three
// constructors (bytes or tokens, embedded-only, the caller's projection),
// step == forward through the whole stack, a few training steps, the
// config's JSON, error paths.
#include <gtest/gtest.h>

#include "kiln/models/mamba_lm.h"
#include "tests/support/models_testing.h"

namespace kiln {
namespace {

models::MambaConfig tiny(int64_t vocab = 256) {
  models::MambaConfig c;
  c.d_model = 16;
  c.n_layer = 2;
  c.vocab_size = vocab;
  c.d_state = 16;
  c.headdim = 8;
  return c;
}

bool has_prefix(const nn::Module& m, const std::string& prefix) {
  for (const auto& [name, p] : m.named_parameters())
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Tensor bytes_of(const std::string& s, int64_t B) {
  std::vector<uint8_t> v;
  for (int64_t b = 0; b < B; ++b)
    for (char c : s) v.push_back(static_cast<uint8_t>(c));
  return tensor(v, {B, static_cast<int64_t>(s.size())});
}

TEST(MambaBackbone, BytesAcceptU8AndI64Alike) {
  Rngs rngs{{"params", 0}};
  models::MambaBackbone bb(tiny(), rngs);
  EXPECT_TRUE(has_prefix(bb, "embed."));
  EXPECT_EQ(bb.blocks.size(), 2u);
  Tensor u8 = bytes_of("hello", 2);
  auto [h, st] = bb.forward(u8);
  EXPECT_EQ(h.shape(), (Shape{2, 5, 16}));
  EXPECT_EQ(st.size(), 2u);
  EXPECT_TRUE(testing::equal(bb.forward(to(u8, kI64)).first, h));
}

TEST(MambaBackbone, EmbeddedOnlyHasNoEmbeddingAnywhere) {
  Rngs rngs{{"params", 0}};
  models::MambaBackbone bb(models::EmbeddedOnly{}, tiny(), rngs);
  EXPECT_TRUE(bb.embedded_only());
  EXPECT_FALSE(has_prefix(bb, "embed"));
  for (const auto& [k, v] : bb.state_dict()) EXPECT_EQ(k.find("embed"), std::string::npos) << k;
  // The same blocks as the byte model's minus the table.
  Rngs rngs2{{"params", 0}};
  models::MambaBackbone with(tiny(), rngs2);
  EXPECT_EQ(bb.num_parameters() + 256 * 16, with.num_parameters());
  const std::string e = error_of([&] { bb.forward(bytes_of("hi", 1)); });
  EXPECT_NE(e.find("MambaBackbone"), std::string::npos) << e;
  EXPECT_NE(e.find("forward_embedded"), std::string::npos) << e;
  auto [h, st] = bb.forward_embedded(ones({1, 3, 16}));
  EXPECT_EQ(h.shape(), (Shape{1, 3, 16}));
}

TEST(MambaBackbone, CallersProjection) {
  Rngs rngs{{"params", 0}};
  models::MambaBackbone bb(nn::share(nn::Linear(6, 16, rngs)), tiny(), rngs);
  EXPECT_TRUE(has_prefix(bb, "input_proj.weight"));
  EXPECT_FALSE(has_prefix(bb, "embed"));
  Tensor pose = ones({2, 4, 6});
  auto [h, st] = bb.forward(pose);
  EXPECT_EQ(h.shape(), (Shape{2, 4, 16}));
  const std::string e = error_of([&] { bb.forward(ones({2, 4, 5})); });
  EXPECT_NE(e.find("[MambaBackbone] input_proj on input [2, 4, 5]"), std::string::npos) << e;
}

TEST(MambaBackbone, TokenModelRefusesU8) {
  Rngs rngs{{"params", 0}};
  models::MambaBackbone bb(tiny(100), rngs);
  const std::string e = error_of([&] { bb.forward(bytes_of("abc", 1)); });
  EXPECT_NE(e.find("MambaBackbone"), std::string::npos) << e;
  EXPECT_NE(e.find("u8 input [1, 3]"), std::string::npos) << e;
  EXPECT_NE(e.find("token-id model"), std::string::npos) << e;
  auto [h, st] = bb.forward(tensor(std::vector<int64_t>{1, 2, 99}, {1, 3}));
  EXPECT_EQ(h.shape(), (Shape{1, 3, 16}));
  // A state from another batch size.
  const std::string e2 = error_of([&] { bb.forward(tensor(std::vector<int64_t>{1, 2}, {1, 2}), bb.zero_state(2)); });
  EXPECT_NE(e2.find("Mamba3"), std::string::npos) << e2;
  EXPECT_NE(e2.find("batch size"), std::string::npos) << e2;
}

TEST(MambaLM, StepEqualsForward) {
  Rngs rngs{{"params", 1}};
  models::MambaLM lm(tiny(), rngs);
  NoGradGuard no_grad;
  const std::string text = "First Citizen:\nBefore we proceed any further, hear me speak.";
  Tensor idx = to(bytes_of(text, 2), kI64);
  const int64_t T = idx.shape()[1];
  auto [logits, st] = lm.forward(idx);
  EXPECT_EQ(logits.shape(), (Shape{2, T, 256}));
  models::MambaState s;
  for (int64_t t = 0; t < T; ++t) {
    auto [lt, s2] = lm.step(select(idx, 1, t), s);
    EXPECT_TRUE(testing::all_close(lt, select(logits, 1, t), 0, 1e-5)) << t;
    s = s2;
  }
}

// Generation holds a state of fixed size: after every one of 400 steps the
// state has the zero state's shapes, and the memory held between steps is
// the same at step 400 as at step 20 (no cache that grows with the length;
// the time per byte is bench/run mamba_generate's).
TEST(MambaLM, GenerationStateDoesNotGrow) {
  Rngs rngs{{"params", 3}};
  models::MambaLM lm(tiny(), rngs);
  lm.eval();
  NoGradGuard no_grad;
  const models::MambaState zero = lm.backbone->zero_state(1);
  auto [logits, st] = lm.forward(tensor(std::vector<int64_t>{70, 105, 114, 115, 116}, {1, 5}));
  Generator gen(0);
  int64_t tok = 32, held_at_20 = -1, held_at_400 = -2;
  for (int64_t i = 1; i <= 400; ++i) {
    auto [lt, s2] = lm.step(tensor(std::vector<int64_t>{tok}, {1}), st);
    st = std::move(s2);
    tok = models::sample_token(select(lt, 0, 0), {.temperature = 1.0}, gen);
    ASSERT_EQ(st.size(), zero.size());
    for (size_t l = 0; l < st.size(); ++l) {
      ASSERT_EQ(st[l].h.shape(), zero[l].h.shape()) << i;
      ASSERT_EQ(st[l].k.shape(), zero[l].k.shape()) << i;
      ASSERT_EQ(st[l].v.shape(), zero[l].v.shape()) << i;
      ASSERT_EQ(st[l].angle.shape(), zero[l].angle.shape()) << i;
    }
    if (i == 20) held_at_20 = memory_stats().current_bytes;
    if (i == 400) held_at_400 = memory_stats().current_bytes;
  }
  EXPECT_EQ(held_at_400, held_at_20);
}

TEST(MambaLM, LearnsARepeatedText) {
  Rngs rngs{{"params", 2}};
  models::MambaLM lm(tiny(), rngs);
  optim::AdamW opt(lm.parameters(), {.lr = 1e-2, .weight_decay = 0.0});
  const std::string text = "abcabcabcabcabcabcabcabcabcabcabcab";
  Tensor all = to(bytes_of(text, 2), kI64);
  const int64_t T = all.shape()[1] - 1;
  Tensor x = narrow(all, 1, 0, T), y = narrow(all, 1, 1, T).contiguous();
  double first = 0, last = 0;
  for (int i = 0; i < 60; ++i) {
    opt.zero_grad();
    Tensor loss = lm.loss(x, y);
    loss.backward();
    opt.step();
    (i == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, 0.3 * first) << first << " -> " << last;
}

TEST(MambaConfig, JsonRoundTripAndErrors) {
  models::MambaConfig c = tiny(300);
  c.dt_max = 0.05;
  models::MambaConfig back = models::MambaConfig::from_json(c.to_json());
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_NE(error_of([] { models::MambaConfig::from_json(R"({"d_model": 16, "headdim": 5})"); }).find("headdim"),
            std::string::npos);
  EXPECT_NE(error_of([] { models::MambaConfig::from_json(R"({"bogus": 1})"); }).find("bogus"), std::string::npos);
}

}  // namespace
}  // namespace kiln
