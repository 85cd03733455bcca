// model/gguf.cpp — GGUF parsing. Every read goes through Reader, which checks
// the bytes exist before touching them; every count is checked against the
// bytes that remain before anything is allocated for it.
#include "model/gguf.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <limits>

#include "base/check.h"

namespace kvasir {
namespace {

constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayDepth = 4;  // arrays of arrays of ... deeper is refused
// Smallest possible encodings, used to bound counts by the remaining bytes.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // empty key, type, u8 value
constexpr uint64_t kMinTensorBytes = 8 + 4 + 8 + 4 + 8;  // empty name, n_dims, 1 dim, type, offset
constexpr uint64_t kMinArrayBytes = 4 + 8;               // elem type + count

// Size of a scalar element; 0 for STRING / ARRAY / unknown.
uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::BOOL:
      return 1;
    case GgufType::U16:
    case GgufType::I16:
      return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32:
      return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64:
      return 8;
    default:
      return 0;
  }
}

bool is_unsigned(GgufType t) {
  return t == GgufType::U8 || t == GgufType::U16 || t == GgufType::U32 || t == GgufType::U64;
}
bool is_signed(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// A bounds-checked cursor over the mapped file. `what` and `field` only build
// the message when a check fails.
class Reader {
 public:
  Reader(const uint8_t* base, uint64_t size, const std::string& path)
      : base_(base), size_(size), path_(path) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  const uint8_t* take(uint64_t n, std::string_view what, std::string_view field) {
    KV_CHECK(
        n <= remaining(),
        "{}: truncated file: {} of '{}' needs {} bytes at offset {}, but the file has {} bytes",
        path_, what, field, n, pos_, size_);
    const uint8_t* p = base_ + pos_;
    pos_ += n;
    return p;
  }
  template <class T>
  T read(std::string_view what, std::string_view field) {
    return load<T>(take(sizeof(T), what, field));
  }
  std::string_view read_string(std::string_view what, std::string_view field) {
    const uint64_t len = read<uint64_t>(what, field);
    KV_CHECK(len <= remaining(),
             "{}: {} of '{}' has length {} at offset {}, beyond the {} bytes left in the file",
             path_, what, field, len, pos_ - 8, remaining());
    const uint8_t* p = take(len, what, field);
    return std::string_view(reinterpret_cast<const char*>(p), len);
  }
  // Refuses a count whose smallest encoding would not fit in what is left.
  void check_count(uint64_t count, uint64_t min_each, std::string_view what,
                   std::string_view field) {
    KV_CHECK(count <= remaining() / min_each,
             "{}: {} of '{}' is {}, impossible in the {} bytes left in the file", path_, what,
             field, count, remaining());
  }

 private:
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
};

void read_array(Reader& r, GgufArray& a, const std::string& path, std::string_view key, int depth) {
  a.elem = GgufType(r.read<uint32_t>("array element type", key));
  a.count = r.read<uint64_t>("array length", key);
  const uint64_t start = r.pos();
  if (a.elem == GgufType::ARRAY) {
    KV_CHECK(depth < kMaxArrayDepth, "{}: metadata '{}': arrays nested deeper than {}", path, key,
             kMaxArrayDepth);
    r.check_count(a.count, kMinArrayBytes, "array length", key);
    a.data = r.take(0, "array", key);
    for (uint64_t i = 0; i < a.count; ++i) {
      GgufArray inner;  // validated, then dropped (see gguf.h)
      read_array(r, inner, path, key, depth + 1);
    }
  } else if (a.elem == GgufType::STRING) {
    r.check_count(a.count, 8, "array length", key);
    a.data = r.take(0, "array", key);
    a.strings.reserve(a.count);
    for (uint64_t i = 0; i < a.count; ++i) a.strings.push_back(r.read_string("array string", key));
  } else {
    const uint64_t size = scalar_size(a.elem);
    KV_CHECK(size != 0, "{}: metadata '{}': unknown array element type {}", path, key,
             uint32_t(a.elem));
    r.check_count(a.count, size, "array length", key);
    a.data = r.take(a.count * size, "array data", key);
    if (a.elem == GgufType::BOOL)
      for (uint64_t i = 0; i < a.count; ++i)
        KV_CHECK(a.data[i] <= 1, "{}: metadata '{}': bool element {} has value {}", path, key, i,
                 a.data[i]);
  }
  a.nbytes = r.pos() - start;
}

GgufValue read_value(Reader& r, GgufType type, const std::string& path, std::string_view key) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::U8:
      v.v = uint64_t(r.read<uint8_t>("value", key));
      break;
    case GgufType::U16:
      v.v = uint64_t(r.read<uint16_t>("value", key));
      break;
    case GgufType::U32:
      v.v = uint64_t(r.read<uint32_t>("value", key));
      break;
    case GgufType::U64:
      v.v = r.read<uint64_t>("value", key);
      break;
    case GgufType::I8:
      v.v = int64_t(r.read<int8_t>("value", key));
      break;
    case GgufType::I16:
      v.v = int64_t(r.read<int16_t>("value", key));
      break;
    case GgufType::I32:
      v.v = int64_t(r.read<int32_t>("value", key));
      break;
    case GgufType::I64:
      v.v = r.read<int64_t>("value", key);
      break;
    case GgufType::F32:
      v.v = double(r.read<float>("value", key));
      break;
    case GgufType::F64:
      v.v = r.read<double>("value", key);
      break;
    case GgufType::BOOL: {
      const uint8_t b = r.read<uint8_t>("value", key);
      KV_CHECK(b <= 1, "{}: metadata '{}': bool has value {}", path, key, b);
      v.v = b != 0;
      break;
    }
    case GgufType::STRING:
      v.v = r.read_string("string", key);
      break;
    case GgufType::ARRAY: {
      GgufArray a;
      read_array(r, a, path, key, 0);
      v.v = std::move(a);
      break;
    }
    default:
      KV_FAIL("{}: metadata '{}': unknown value type {}", path, key, uint32_t(type));
  }
  return v;
}

[[noreturn]] void type_mismatch(const std::string& key, const char* want, GgufType got) {
  KV_FAIL("metadata '{}': expected {}, found {}", key, want, GgufFile::type_name(got));
}

}  // namespace

const char* GgufFile::type_name(GgufType t) {
  switch (t) {
    case GgufType::U8:
      return "u8";
    case GgufType::I8:
      return "i8";
    case GgufType::U16:
      return "u16";
    case GgufType::I16:
      return "i16";
    case GgufType::U32:
      return "u32";
    case GgufType::I32:
      return "i32";
    case GgufType::F32:
      return "f32";
    case GgufType::BOOL:
      return "bool";
    case GgufType::STRING:
      return "string";
    case GgufType::ARRAY:
      return "array";
    case GgufType::U64:
      return "u64";
    case GgufType::I64:
      return "i64";
    case GgufType::F64:
      return "f64";
  }
  return "unknown type";
}

uint64_t GgufValue::as_uint(const std::string& key) const {
  if (is_unsigned(type)) return std::get<uint64_t>(v);
  if (is_signed(type)) {
    const int64_t i = std::get<int64_t>(v);
    KV_CHECK(i >= 0, "metadata '{}': expected a non-negative integer, found {}", key, i);
    return uint64_t(i);
  }
  type_mismatch(key, "an unsigned integer", type);
}

int64_t GgufValue::as_int(const std::string& key) const {
  if (is_signed(type)) return std::get<int64_t>(v);
  if (is_unsigned(type)) {
    const uint64_t u = std::get<uint64_t>(v);
    KV_CHECK(u <= uint64_t(std::numeric_limits<int64_t>::max()),
             "metadata '{}': {} does not fit a signed 64-bit integer", key, u);
    return int64_t(u);
  }
  type_mismatch(key, "an integer", type);
}

double GgufValue::as_float(const std::string& key) const {
  if (type == GgufType::F32 || type == GgufType::F64) return std::get<double>(v);
  if (is_signed(type)) return double(std::get<int64_t>(v));
  if (is_unsigned(type)) return double(std::get<uint64_t>(v));
  type_mismatch(key, "a number", type);
}

bool GgufValue::as_bool(const std::string& key) const {
  if (type == GgufType::BOOL) return std::get<bool>(v);
  type_mismatch(key, "a bool", type);
}

std::string_view GgufValue::as_string(const std::string& key) const {
  if (type == GgufType::STRING) return std::get<std::string_view>(v);
  type_mismatch(key, "a string", type);
}

const GgufArray& GgufValue::as_array(const std::string& key) const {
  if (type == GgufType::ARRAY) return std::get<GgufArray>(v);
  type_mismatch(key, "an array", type);
}

int64_t GgufArray::int_at(uint64_t i, const std::string& key) const {
  KV_CHECK(i < count, "metadata '{}': index {} out of range (array of {})", key, i, count);
  const uint8_t* p = data + i * scalar_size(elem);
  switch (elem) {
    case GgufType::U8:
    case GgufType::BOOL:
      return load<uint8_t>(p);
    case GgufType::I8:
      return load<int8_t>(p);
    case GgufType::U16:
      return load<uint16_t>(p);
    case GgufType::I16:
      return load<int16_t>(p);
    case GgufType::U32:
      return load<uint32_t>(p);
    case GgufType::I32:
      return load<int32_t>(p);
    case GgufType::I64:
      return load<int64_t>(p);
    case GgufType::U64: {
      const uint64_t u = load<uint64_t>(p);
      KV_CHECK(u <= uint64_t(std::numeric_limits<int64_t>::max()),
               "metadata '{}': element {} ({}) does not fit a signed 64-bit integer", key, i, u);
      return int64_t(u);
    }
    default:
      KV_FAIL("metadata '{}': expected an integer array, found an array of {}", key,
              GgufFile::type_name(elem));
  }
}

double GgufArray::float_at(uint64_t i, const std::string& key) const {
  KV_CHECK(i < count, "metadata '{}': index {} out of range (array of {})", key, i, count);
  const uint8_t* p = data + i * scalar_size(elem);
  if (elem == GgufType::F32) return load<float>(p);
  if (elem == GgufType::F64) return load<double>(p);
  if (elem == GgufType::U64) return double(load<uint64_t>(p));
  return double(int_at(i, key));
}

GgufFile::~GgufFile() = default;

namespace {

// The header's magic and version (2 or 3, little-endian).
uint32_t read_version(Reader& r, const std::string& path) {
  const uint8_t* magic = r.take(4, "magic", "header");
  KV_CHECK(std::memcmp(magic, "GGUF", 4) == 0,
           "{}: not a GGUF file (magic bytes {:02x} {:02x} {:02x} {:02x}, expected 'GGUF')", path,
           magic[0], magic[1], magic[2], magic[3]);
  const uint32_t version = r.read<uint32_t>("version", "header");
  KV_CHECK(version != 1,
           "{}: GGUF version 1 is not supported (it used 32-bit counts); Kvasir reads versions 2 "
           "and 3 — re-convert the model with a current llama.cpp",
           path);
  KV_CHECK((version & 0xffff) != 0,
           "{}: GGUF version field is {:#x}: this looks like a big-endian file, which Kvasir does "
           "not read",
           path, version);
  KV_CHECK(version == 2 || version == 3,
           "{}: unsupported GGUF version {} (Kvasir reads versions 2 and 3)", path, version);
  return version;
}

// metadata 'general.alignment': a non-zero power of two up to 1 GiB.
uint64_t read_alignment(const GgufValue& a, const std::string& path) {
  uint64_t align = 0;
  try {
    align = a.as_uint("general.alignment");
  } catch (const Error& e) {
    KV_FAIL("{}: {}", path, e.message());
  }
  KV_CHECK(align != 0 && (align & (align - 1)) == 0,
           "{}: metadata 'general.alignment' is {}: must be a non-zero power of two", path, align);
  KV_CHECK(align <= (uint64_t(1) << 30), "{}: metadata 'general.alignment' is {}: too large", path,
           align);
  return align;
}

// One tensor info: name, dimensions (each and their products within int64),
// type (a GGML type whose block divides the row), byte size and offset.
GgufTensor read_tensor_info(Reader& r, const std::string& path, const std::string& slot) {
  GgufTensor t;
  t.name = std::string(r.read_string("name", slot));
  KV_CHECK(!t.name.empty(), "{}: {} has an empty name", path, slot);
  const std::string& name = t.name;
  const uint32_t n_dims = r.read<uint32_t>("n_dims", name);
  KV_CHECK(n_dims >= 1 && n_dims <= kMaxDims,
           "{}: tensor '{}': n_dims is {}, Kvasir reads tensors of 1 to {} dimensions", path, name,
           n_dims, kMaxDims);
  t.view.n_dims = int(n_dims);
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t ne = r.read<uint64_t>("dimension", name);
    KV_CHECK(ne <= uint64_t(std::numeric_limits<int64_t>::max()),
             "{}: tensor '{}': dimension {} is {}, beyond int64", path, name, d, ne);
    t.view.ne[d] = int64_t(ne);
  }
  // The row count (ne[1] x ne[2] x ne[3], TensorView::rows()) and the
  // element count must fit int64 too: with a zero-length row the byte size
  // below is 0 whatever the other dimensions are (found by fuzz_gguf:
  // rows() multiplied 5539037184 by 1.08e18).
  int64_t n_rows = 1, elems = 0;
  for (uint32_t d = 1; d < n_dims; ++d)
    KV_CHECK(!__builtin_mul_overflow(n_rows, t.view.ne[d], &n_rows),
             "{}: tensor '{}': its row count overflows int64", path, name);
  KV_CHECK(!__builtin_mul_overflow(n_rows, t.view.ne[0], &elems),
           "{}: tensor '{}': its element count overflows int64", path, name);
  const uint32_t raw = r.read<uint32_t>("type", name);
  const DTypeInfo* info = dtype_info(raw);
  // F8_E4M3 and U8 are Kvasir's own numbers for safetensors' dtypes, not GGML types.
  KV_CHECK(info && info->type != DType::F8_E4M3 && info->type != DType::U8,
           "{}: tensor '{}': unknown tensor type {}", path, name, raw);
  t.view.type = info->type;
  KV_CHECK(t.view.ne[0] % info->block == 0,
           "{}: tensor '{}': row length {} is not a multiple of the {} block size {}", path, name,
           t.view.ne[0], info->name, info->block);
  const auto bytes = dtype_tensor_bytes(info->type, t.view.ne, t.view.n_dims);
  KV_CHECK(bytes, "{}: tensor '{}': byte size of [{}, {}, {}, {}] {} overflows 64 bits", path, name,
           t.view.ne[0], t.view.ne[1], t.view.ne[2], t.view.ne[3], info->name);
  t.view.nbytes = *bytes;
  t.offset = r.read<uint64_t>("offset", name);
  return t;
}

}  // namespace

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->file_ = MappedFile::open(path);
  f->map_ = f->file_->data();
  f->size_ = f->file_->size();
  Reader r(f->map_, f->size_, path);

  f->version_ = read_version(r, path);
  const uint64_t n_tensors = r.read<uint64_t>("count", "n_tensors");
  const uint64_t n_kv = r.read<uint64_t>("count", "n_kv");
  r.check_count(n_tensors, kMinTensorBytes, "tensor count", "n_tensors");
  r.check_count(n_kv, kMinKvBytes, "metadata count", "n_kv");

  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string slot = fmt::format("metadata entry #{}", i);
    const std::string key(r.read_string("key", slot));
    KV_CHECK(!key.empty(), "{}: {} has an empty key", path, slot);
    const auto type = GgufType(r.read<uint32_t>("value type", key));
    GgufValue v = read_value(r, type, path, key);
    KV_CHECK(f->kv_.emplace(key, std::move(v)).second, "{}: duplicate metadata key '{}'", path,
             key);
  }

  if (const GgufValue* a = f->find("general.alignment")) f->alignment_ = read_alignment(*a, path);

  f->tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const std::string slot = fmt::format("tensor info #{}", i);
    GgufTensor t = read_tensor_info(r, path, slot);
    const std::string& name = t.name;
    KV_CHECK(f->tensor_index_.emplace(name, f->tensors_.size()).second,
             "{}: duplicate tensor name '{}'", path, name);
    f->tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t pos = r.pos();
  KV_CHECK(pos <= std::numeric_limits<uint64_t>::max() - (f->alignment_ - 1),
           "{}: data section offset overflows", path);
  f->data_start_ = (pos + f->alignment_ - 1) & ~(f->alignment_ - 1);
  if (!f->tensors_.empty())
    KV_CHECK(f->data_start_ <= f->size_,
             "{}: truncated file: the data section would start at offset {}, but the file has {} "
             "bytes",
             path, f->data_start_, f->size_);
  const uint64_t data_size = f->data_start_ <= f->size_ ? f->size_ - f->data_start_ : 0;
  for (GgufTensor& t : f->tensors_) {
    KV_CHECK(t.offset % f->alignment_ == 0,
             "{}: tensor '{}': offset {} is not a multiple of the alignment {}", path, t.name,
             t.offset, f->alignment_);
    KV_CHECK(t.offset <= data_size && t.view.nbytes <= data_size - t.offset,
             "{}: tensor '{}': data [{}, +{}) lies outside the {}-byte data section (file "
             "truncated or offset corrupt)",
             path, t.name, t.offset, t.view.nbytes, data_size);
    t.view.data = f->map_ + f->data_start_ + t.offset;
  }
  return f;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufValue& GgufFile::get(const std::string& key) const {
  const GgufValue* v = find(key);
  KV_CHECK(v, "{}: metadata key '{}' is missing", path_, key);
  return *v;
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::release_pages(const void* p, uint64_t n) const {
  const auto* b = static_cast<const uint8_t*>(p);
  if (!map_ || b < map_ || n > size_ || uint64_t(b - map_) > size_ - n) return;
  const long page_size = sysconf(_SC_PAGESIZE);
  const uintptr_t page = uintptr_t(page_size > 0 ? page_size : 4096);
  const uintptr_t start = (reinterpret_cast<uintptr_t>(b) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(b) + n) & ~(page - 1);
  // A private read-only mapping of the file: its pages are the file's, so
  // dropping them loses nothing. Advisory: a failure changes nothing.
  if (end > start) madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTNEED);
}

}  // namespace kvasir
