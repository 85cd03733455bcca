#include "tests/support/gguf_writer.h"

#include <fstream>

#include "base/check.h"

namespace kvasir::test {
namespace {

template <class T>
void put(Bytes& b, T v) {
  const size_t at = b.size();
  b.resize(at + sizeof(T));
  std::memcpy(b.data() + at, &v, sizeof(T));
}
void append(Bytes& b, const Bytes& more) {
  b.insert(b.end(), more.begin(), more.end());
}
uint64_t align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

}  // namespace

Bytes GgufWriter::encode_string(std::string_view s) {
  Bytes b;
  put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
  return b;
}

Bytes GgufWriter::encode_array(GgufType elem, uint64_t count, const Bytes& payload) {
  Bytes b;
  put<uint32_t>(b, uint32_t(elem));
  put<uint64_t>(b, count);
  append(b, payload);
  return b;
}

void GgufWriter::add_string_array(const std::string& k, const std::vector<std::string>& v) {
  Bytes payload;
  for (const auto& s : v) append(payload, encode_string(s));
  add_raw(k, GgufType::ARRAY, encode_array(GgufType::STRING, v.size(), payload));
}

void GgufWriter::add_raw(const std::string& key, GgufType type, Bytes payload) {
  kvs_.push_back({key, type, std::move(payload)});
}

void GgufWriter::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& ne,
                            Bytes data) {
  std::vector<uint64_t> dims(ne.begin(), ne.end());
  add_tensor_raw(name, uint32_t(type), dims, std::move(data));
}

void GgufWriter::add_tensor_raw(const std::string& name, uint32_t raw_type,
                                const std::vector<uint64_t>& dims, Bytes data,
                                std::optional<uint64_t> offset) {
  tensors_.push_back({name, raw_type, dims, std::move(data), offset});
}

Bytes GgufWriter::bytes(Layout* layout) const {
  Layout lay;
  Bytes b = {'G', 'G', 'U', 'F'};
  lay.version = b.size();
  put<uint32_t>(b, version);
  lay.n_tensors = b.size();
  put<uint64_t>(b, tensors_.size());
  lay.n_kv = b.size();
  put<uint64_t>(b, kvs_.size());
  for (const Kv& kv : kvs_) {
    lay.kv_key.push_back(b.size());
    append(b, encode_string(kv.key));
    lay.kv_type.push_back(b.size());
    put<uint32_t>(b, uint32_t(kv.type));
    append(b, kv.payload);
  }
  // Offsets: explicit ones as given, the others packed at aligned positions.
  std::vector<uint64_t> offsets;
  uint64_t cur = 0;
  for (const Tensor& t : tensors_) {
    if (t.offset) {
      offsets.push_back(*t.offset);
    } else {
      cur = align_up(cur, alignment);
      offsets.push_back(cur);
      cur += t.data.size();
    }
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    lay.tensor_name.push_back(b.size());
    append(b, encode_string(t.name));
    lay.tensor_n_dims.push_back(b.size());
    put<uint32_t>(b, uint32_t(t.dims.size()));
    for (uint64_t d : t.dims) put<uint64_t>(b, d);
    lay.tensor_type.push_back(b.size());
    put<uint32_t>(b, t.type);
    lay.tensor_offset.push_back(b.size());
    put<uint64_t>(b, offsets[i]);
  }
  lay.data = align_up(b.size(), alignment);
  b.resize(lay.data + cur, 0);
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (!tensors_[i].offset && !tensors_[i].data.empty())
      std::memcpy(b.data() + lay.data + offsets[i], tensors_[i].data.data(),
                  tensors_[i].data.size());
  if (layout) *layout = std::move(lay);
  return b;
}

void GgufWriter::write_file(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  KV_CHECK(out.good(), "cannot write {}", path);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  KV_CHECK(out.good(), "cannot write {}", path);
}

}  // namespace kvasir::test
