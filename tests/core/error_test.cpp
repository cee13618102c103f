// kiln::Error and KILN_CHECK: "[op] message" with the check's location.
#include "tests/support/test_util.h"

namespace kiln {
namespace {

void check_positive(int v) { KILN_CHECK(v > 0, "positive", "value {} of {} is not positive", v, "x"); }

TEST(Error, MessageFormat) {
  Error e("linear", "input [32, 780] does not match weight [256, 784]");
  EXPECT_STREQ(e.what(), "[linear] input [32, 780] does not match weight [256, 784]");
  EXPECT_EQ(e.op(), "linear");
}

TEST(Error, CheckThrowsWithLocation) {
  try {
    check_positive(-2);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[positive] value -2 of x is not positive");
    EXPECT_EQ(e.op(), "positive");
    EXPECT_NE(std::string(e.file()).find("error_test.cpp"), std::string::npos) << e.file();
    EXPECT_GT(e.line(), 0);
  }
  EXPECT_NO_THROW(check_positive(1));
}

TEST(Error, IsARuntimeError) {
  try {
    KILN_FAIL("op", "broken {}", 42);
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "[op] broken 42");
    return;
  }
  FAIL() << "not caught as std::runtime_error";
}

TEST(Error, ArgumentsAreOnlyFormattedOnFailure) {
  int calls = 0;
  auto expensive = [&] {
    ++calls;
    return 1;
  };
  KILN_CHECK(true, "op", "{}", expensive());
  EXPECT_EQ(calls, 0);
  EXPECT_KILN_ERROR(KILN_CHECK(false, "op", "{}", expensive()), "[op] 1");
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace kiln
