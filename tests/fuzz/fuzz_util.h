// tests/fuzz/fuzz_util.h — helpers shared by the libFuzzer targets.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace kvasir::fuzz {

// The readers take a path: the input goes into one memfd (a regular file in
// memory, so no disk traffic), reached as /proc/self/fd/N.
class MemFile {
 public:
  MemFile() {
    fd_ = ::memfd_create("kvasir-fuzz", MFD_CLOEXEC);
    if (fd_ < 0) std::abort();
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  // Replace the contents with data[0, size).
  const std::string& set(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pwrite(fd_, data + done, size - done, off_t(done));
      if (n <= 0) std::abort();
      done += size_t(n);
    }
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// The source tree (compile-time default, KVASIR_SOURCE_DIR overrides).
inline std::string source_dir() {
  if (const char* e = std::getenv("KVASIR_SOURCE_DIR")) return e;
#ifdef KVASIR_SOURCE_DIR
  return KVASIR_SOURCE_DIR;
#else
  return ".";
#endif
}

// Reads every byte of [p, p+n): a view pointing outside the mapping faults
// here instead of later in a stage.
inline uint8_t touch(const void* p, uint64_t n) {
  if (!p || n == 0) return 0;
  const volatile uint8_t* b = static_cast<const volatile uint8_t*>(p);
  uint8_t acc = b[0] ^ b[n - 1];
  for (uint64_t i = 0; i < n; i += 4096) acc ^= b[i];
  return acc;
}

}  // namespace kvasir::fuzz
