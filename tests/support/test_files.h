// tests/support/test_files.h — temporary folders, file bytes, and a check that
// a call throws kvasir::Error whose message names what it should.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

#include "base/check.h"

namespace kvasir::test {

// A fresh folder under the gtest temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::path(::testing::TempDir()) /
            ("kvasir-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs fn; it must throw kvasir::Error whose message contains every part.
template <class Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    for (const auto& p : parts)
      EXPECT_NE(e.message().find(p), std::string::npos)
          << "message lacks '" << p << "': " << e.message();
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-kvasir exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "did not throw; expected an error naming " << *parts.begin();
}

}  // namespace kvasir::test
