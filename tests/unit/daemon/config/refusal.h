// What parse_config (and, given a model, check_against_model) says of a
// config text: the refusal's message, or "(accepted)". Shared by the config
// tests, which check that every refusal names its field and says why.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "base/check.h"
#include "daemon/config/config.h"

namespace kvasir::test {

inline std::string refusal(const std::string& text, const ModelConfig* model = nullptr) {
  try {
    Config c = parse_config(text, "/base");
    if (model) check_against_model(c, *model);
  } catch (const Error& e) {
    return e.message();
  }
  return "(accepted)";
}

// The message names `field` and says `why`.
inline void expect_refused(const std::string& m, const char* field, const char* why) {
  EXPECT_NE(m.find(field), std::string::npos) << m;
  EXPECT_NE(m.find(why), std::string::npos) << m;
}

}  // namespace kvasir::test
