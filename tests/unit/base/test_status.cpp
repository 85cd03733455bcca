// base/status.h and the code carried by kvasir::Error (base/check.h).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "base/check.h"
#include "base/status.h"

namespace kvasir {
namespace {

TEST(Status, OkByDefaultAndCarriesNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kOk);
  EXPECT_EQ(s.to_string(), "ok");
  EXPECT_TRUE(Status(ErrorCode::kOk, "ignored").message().empty());
}

TEST(Status, CodeAndMessage) {
  Status s = error_status(ErrorCode::kQueueFull, "queue full ({} requests waiting)", 5);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kQueueFull);
  EXPECT_EQ(s.message(), "queue full (5 requests waiting)");
  EXPECT_EQ(s.to_string(), "queue_full: queue full (5 requests waiting)");
}

TEST(Status, EveryCodeHasADistinctNameAndRoundTripsThroughItsInteger) {
  std::set<std::string> names;
  for (int32_t v = 0; v < 64; ++v) {
    const auto c = static_cast<ErrorCode>(v);
    const std::string name = error_code_name(c);
    if (name == "unknown") {
      EXPECT_EQ(error_code_from_int(v), ErrorCode::kInternal) << v;
      continue;
    }
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_EQ(error_code_from_int(v), c) << name;
  }
  EXPECT_GE(names.size(), 20u);
  EXPECT_EQ(error_code_from_int(-1), ErrorCode::kInternal);
  EXPECT_EQ(error_code_from_int(1 << 20), ErrorCode::kInternal);
}

Status fails_then(bool fail) {
  KV_RETURN_IF_ERROR(fail ? Status(ErrorCode::kIo, "read failed") : Status());
  return Status(ErrorCode::kInternal, "reached the end");
}

TEST(Status, ReturnIfError) {
  EXPECT_EQ(fails_then(true).code(), ErrorCode::kIo);
  EXPECT_EQ(fails_then(false).code(), ErrorCode::kInternal);
}

TEST(Error, ChecksCarryACode) {
  try {
    KV_CHECK(1 + 1 == 3, "arithmetic: {}", 2);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(e.message(), "arithmetic: 2");
    EXPECT_EQ(e.status().code(), ErrorCode::kInvalidArgument);
  }
  try {
    KV_CHECK_CODE(false, ErrorCode::kModelFormat, "tensor {} missing", "x");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kModelFormat);
    EXPECT_NE(e.describe().find("test_status.cpp"), std::string::npos);
  }
  try {
    KV_THROW_IF_ERROR(Status(ErrorCode::kDevice, "cudaMalloc failed"));
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDevice);
    EXPECT_EQ(e.message(), "cudaMalloc failed");
  }
  EXPECT_NO_THROW(KV_THROW_IF_ERROR(Status()));
}

}  // namespace
}  // namespace kvasir
