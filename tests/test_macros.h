// Assertions on Status / StatusOr for tests.
#pragma once

#include <gtest/gtest.h>

#include "tessera/base/status.h"

#define ASSERT_OK(expr)                                         \
  do {                                                          \
    ::tessera::Status ts_s_ = (expr);                           \
    ASSERT_TRUE(ts_s_.ok()) << #expr << ": " << ts_s_.to_string(); \
  } while (0)
#define EXPECT_OK(expr)                                          \
  do {                                                           \
    ::tessera::Status ts_s_ = (expr);                            \
    EXPECT_TRUE(ts_s_.ok()) << #expr << ": " << ts_s_.to_string(); \
  } while (0)

#define TS_TEST_ASSIGN_IMPL(tmp, lhs, expr)                                  \
  auto tmp = (expr);                                                         \
  ASSERT_TRUE(tmp.ok()) << #expr << ": " << tmp.status().to_string();        \
  lhs = std::move(tmp).value()
#define ASSERT_OK_AND_ASSIGN(lhs, expr) TS_TEST_ASSIGN_IMPL(TS_CONCAT(ts_test_so_, __LINE__), lhs, expr)

// Asserts that `expr` fails with `code` and a message containing `substr`.
#define EXPECT_ERROR(expr, expected_code, substr)                                               \
  do {                                                                                 \
    auto ts_r_ = (expr);                                                               \
    ::tessera::Status ts_s_ = ::tessera::testing_status_of(ts_r_);                     \
    EXPECT_EQ(ts_s_.code(), expected_code) << ts_s_.to_string();                                \
    EXPECT_NE(ts_s_.message().find(substr), std::string::npos) << ts_s_.to_string();   \
  } while (0)

namespace tessera {
inline Status testing_status_of(const Status& s) { return s; }
template <class T>
Status testing_status_of(const StatusOr<T>& s) { return s.status(); }
}  // namespace tessera
