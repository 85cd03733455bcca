// model/mapped_file.h — a read-only private mapping of a whole file.
//
// The model readers never copy weights: tensors are views into this mapping,
// so it lives exactly as long as the reader object that owns it. Empty files
// are not mapped (mmap refuses length 0); data() is then nullptr and size() 0,
// and the parsers report the file as truncated.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace kvasir {

class MappedFile {
 public:
  // Throws kvasir::Error naming the path if the file cannot be opened or mapped.
  static std::unique_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace kvasir
