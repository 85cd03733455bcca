// tests/support/gguf_writer.h — builds GGUF files byte by byte for tests.
//
// Well-formed by default; every field's file offset is reported in a Layout
// so a test can corrupt exactly one field (a count, a length, a type, an
// offset) and check the reader's error names it.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "model/gguf.h"

namespace kvasir::test {

using Bytes = std::vector<uint8_t>;

class GgufWriter {
 public:
  // File offsets of each field, in the order added.
  struct Layout {
    size_t version = 0, n_tensors = 0, n_kv = 0;
    std::vector<size_t> kv_key;         // u64 key length (key bytes follow)
    std::vector<size_t> kv_type;        // u32 value type (the value follows at +4)
    std::vector<size_t> tensor_name;    // u64 name length
    std::vector<size_t> tensor_n_dims;  // u32 n_dims (u64 dims follow at +4)
    std::vector<size_t> tensor_type;    // u32 type
    std::vector<size_t> tensor_offset;  // u64 offset
    size_t data = 0;                    // start of the data section
  };

  uint32_t version = 3;
  uint64_t alignment = 32;  // used for padding; add "general.alignment" yourself to declare another

  void add_u8(const std::string& k, uint8_t v) { add_pod(k, GgufType::U8, v); }
  void add_i8(const std::string& k, int8_t v) { add_pod(k, GgufType::I8, v); }
  void add_u16(const std::string& k, uint16_t v) { add_pod(k, GgufType::U16, v); }
  void add_i16(const std::string& k, int16_t v) { add_pod(k, GgufType::I16, v); }
  void add_u32(const std::string& k, uint32_t v) { add_pod(k, GgufType::U32, v); }
  void add_i32(const std::string& k, int32_t v) { add_pod(k, GgufType::I32, v); }
  void add_u64(const std::string& k, uint64_t v) { add_pod(k, GgufType::U64, v); }
  void add_i64(const std::string& k, int64_t v) { add_pod(k, GgufType::I64, v); }
  void add_f32(const std::string& k, float v) { add_pod(k, GgufType::F32, v); }
  void add_f64(const std::string& k, double v) { add_pod(k, GgufType::F64, v); }
  void add_bool(const std::string& k, bool v) { add_pod(k, GgufType::BOOL, uint8_t(v)); }
  void add_string(const std::string& k, std::string_view v) {
    add_raw(k, GgufType::STRING, encode_string(v));
  }
  template <class T>
  void add_array(const std::string& k, GgufType elem, const std::vector<T>& v) {
    Bytes payload(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(payload.data(), v.data(), payload.size());
    add_raw(k, GgufType::ARRAY, encode_array(elem, v.size(), payload));
  }
  void add_string_array(const std::string& k, const std::vector<std::string>& v);
  // Any value: `payload` is what follows the u32 type in the file.
  void add_raw(const std::string& key, GgufType type, Bytes payload);

  static Bytes encode_string(std::string_view s);
  // elem type, count, then the payload as given (build nested arrays with it).
  static Bytes encode_array(GgufType elem, uint64_t count, const Bytes& payload);

  // A tensor with its data, placed at the next aligned offset.
  void add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne, Bytes data);
  // Full control over the info; with an explicit offset no data is written.
  void add_tensor_raw(const std::string& name, uint32_t raw_type, const std::vector<uint64_t>& dims,
                      Bytes data, std::optional<uint64_t> offset = std::nullopt);

  Bytes bytes(Layout* layout = nullptr) const;
  void write(const std::string& path) const { write_file(path, bytes()); }

  static void write_file(const std::string& path, const Bytes& b);
  static void put_u32(Bytes& b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }
  static void put_u64(Bytes& b, size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); }

 private:
  template <class T>
  void add_pod(const std::string& k, GgufType t, T v) {
    Bytes p(sizeof(T));
    std::memcpy(p.data(), &v, sizeof(T));
    add_raw(k, t, std::move(p));
  }
  struct Kv {
    std::string key;
    GgufType type;
    Bytes payload;
  };
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<uint64_t> dims;
    Bytes data;
    std::optional<uint64_t> offset;
  };
  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace kvasir::test
