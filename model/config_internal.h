// model/config_internal.h — what config.cpp (GGUF) and config_hf.cpp
// (config.json) share; not part of model/'s face.
#pragma once

#include <cstdint>
#include <string>

namespace kvasir {

// The expert counts as the file gives them, refused naming the file's keys:
// n experts (1..kMaxExperts), k of them used per token (1..n).
void check_expert_counts(const std::string& src, const std::string& n_key, int64_t n,
                         const std::string& k_key, int64_t k);

}  // namespace kvasir
