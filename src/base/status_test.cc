#include "tessera/base/status.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

StatusOr<int> half(int x) {
  if (x % 2) return invalid_argument_error("half: expected an even number, found {}", x);
  return x / 2;
}

StatusOr<int> quarter(int x) {
  TS_ASSIGN_OR_RETURN(int h, half(x));
  TS_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

TEST(Status, OkIsDefaultAndCheap) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.to_string(), "OK");
  EXPECT_EQ(sizeof(Status), sizeof(std::shared_ptr<int>));
}

TEST(Status, CarriesCodeAndMessage) {
  Status s = resource_exhausted_error("L1 full: {} B requested", 128);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.to_string(), "RESOURCE_EXHAUSTED: L1 full: 128 B requested");
  EXPECT_EQ(s.annotate("conv1").message(), "conv1: L1 full: 128 B requested");
}

TEST(StatusOr, PropagatesErrors) {
  EXPECT_EQ(*quarter(8), 2);
  StatusOr<int> r = quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "half: expected an even number, found 3");
  EXPECT_THROW((void)r.value(), BadStatusOrAccess);
}

TEST(StatusOr, OkStatusIsAnInternalError) {
  StatusOr<int> r{Status()};
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace tessera
