// model/gguf.h — a GGUF v2/v3 reader over mmap, bounds-checked throughout.
//
// Layout (little-endian):
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv × (string key, u32 type, value)
//   n_tensors × (string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset)
//   padding to general.alignment (default 32) | data section
// Strings are u64 length + bytes (no terminator). Tensor offsets are relative
// to the data section and multiples of the alignment.
//
// Every count, length, offset and shape product is checked for overflow and
// against the file size before use; a malformed file throws kvasir::Error
// naming the file, the field and the fault.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/tensor.h"
#include "model/mapped_file.h"

namespace kvasir {

// Metadata value types, numbered as the format numbers them.
enum class GgufType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

// A metadata value. Arrays keep their element type; string arrays hold views
// into the mapped file (valid while the GgufFile lives). Arrays of arrays are
// validated (depth-limited) but not decoded: `data`/`nbytes` span their raw
// encoding, so a reader that needs them can walk it, and nothing allocates
// in proportion to an attacker-chosen count.
struct GgufArray {
  GgufType elem = GgufType::U8;
  uint64_t count = 0;
  const uint8_t* data = nullptr;          // raw elements, possibly unaligned (little-endian)
  uint64_t nbytes = 0;                    // bytes spanned by the elements in the file
  std::vector<std::string_view> strings;  // when elem == STRING

  // Element i of an integer (or BOOL) array as int64 / of any numeric array as
  // double. Throw kvasir::Error naming `key` on a bad index or element type,
  // or a U64 value beyond int64.
  int64_t int_at(uint64_t i, const std::string& key) const;
  double float_at(uint64_t i, const std::string& key) const;
};

struct GgufValue {
  GgufType type = GgufType::U8;
  std::variant<uint64_t, int64_t, double, bool, std::string_view, GgufArray> v;

  // Typed accessors; throw kvasir::Error (naming `key`) on a type mismatch.
  uint64_t as_uint(const std::string& key) const;  // any unsigned or non-negative signed int
  int64_t as_int(const std::string& key) const;
  double as_float(const std::string& key) const;  // F32/F64 (ints accepted)
  bool as_bool(const std::string& key) const;
  std::string_view as_string(const std::string& key) const;
  const GgufArray& as_array(const std::string& key) const;
};

struct GgufTensor {
  std::string name;
  TensorView view;      // type, dims, data pointer into the map, byte size
  uint64_t offset = 0;  // relative to the data section
};

class GgufFile {
 public:
  static std::unique_ptr<GgufFile> open(const std::string& path);
  ~GgufFile();
  // Name of a metadata type ("u32", "string", ...; "type N" if unknown), for messages.
  static const char* type_name(GgufType t);
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }

  const GgufValue* find(const std::string& key) const;  // nullptr if absent
  const GgufValue& get(const std::string& key) const;   // throws if absent
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(const std::string& name) const;
  // File offset of the data section (tensor offsets are relative to it).
  uint64_t data_start() const { return data_start_; }
  uint64_t file_size() const { return size_; }
  // Drops this process's pages of the bytes [p, p + n) where they lie in
  // the file's mapping (whole pages inside the range only; a later read
  // faults them back in from the file). Nothing for bytes elsewhere.
  void release_pages(const void* p, uint64_t n) const;

 private:
  GgufFile() = default;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::unique_ptr<MappedFile> file_;  // owns the mapping every view points into
  const uint8_t* map_ = nullptr;
  uint64_t size_ = 0;
  uint64_t data_start_ = 0;  // file offset of the data section
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace kvasir
