// GGUF reader on malformed input: every fault is a kvasir::Error naming the
// file and the field, never a crash or a huge allocation.
#include <gtest/gtest.h>

#include <limits>

#include "model/gguf.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/test_files.h"
#include "tests/support/tiny_model.h"

namespace kvasir {
namespace {

using test::Bytes;
using test::GgufWriter;

// A small valid file: a few kvs (one string, one array) and two tensors.
GgufWriter base_writer() {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("general.alignment", 32);
  w.add_array("arr", GgufType::I32, std::vector<int32_t>{1, 2, 3});
  w.add_string_array("strs", {"ab", "c"});
  w.add_tensor("w.f32", DType::F32, {32, 2}, Bytes(32 * 2 * 4, 0));
  w.add_tensor("w.q41", DType::Q4_1, {64, 1}, Bytes(2 * 20, 0));
  return w;
}

class GgufBad : public ::testing::Test {
 protected:
  // Writes `b` and expects open() to fail naming the path and every part.
  void expect_bad(const Bytes& b, std::initializer_list<std::string> parts) {
    const std::string path = dir_.file("bad.gguf");
    GgufWriter::write_file(path, b);
    test::expect_error([&] { GgufFile::open(path); }, parts);
    test::expect_error([&] { GgufFile::open(path); }, {path});
  }
  void expect_bad(const GgufWriter& w, std::initializer_list<std::string> parts) {
    expect_bad(w.bytes(), parts);
  }
  test::TempDir dir_;
};

TEST_F(GgufBad, BaseFileIsValid) {
  const std::string path = dir_.file("ok.gguf");
  base_writer().write(path);
  EXPECT_EQ(GgufFile::open(path)->tensors().size(), 2u);
}

TEST_F(GgufBad, TruncatedAtEveryCutPoint) {
  const Bytes full = base_writer().bytes();
  for (size_t cut = 0; cut < full.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    expect_bad(Bytes(full.begin(), full.begin() + long(cut)), {});
  }
}

TEST_F(GgufBad, TruncatedTinyModelAtManyCutPoints) {
  const std::string path = dir_.file("tiny.gguf");
  test::TinySpec spec;
  spec.matrix_type = DType::Q8_0;
  test::write_tiny_gguf(path, spec);
  const Bytes full = test::read_bytes(path);
  for (size_t cut = 0; cut < full.size(); cut += 1 + cut / 16) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    expect_bad(Bytes(full.begin(), full.begin() + long(cut)), {});
  }
}

TEST_F(GgufBad, TruncationMessageNamesTheField) {
  GgufWriter::Layout lay;
  const Bytes full = base_writer().bytes(&lay);
  expect_bad(Bytes(full.begin(), full.begin() + long(lay.kv_type[2] + 6)), {"truncated", "'arr'"});
  expect_bad(Bytes(full.begin(), full.begin() + long(lay.tensor_type[1] + 1)),
             {"truncated", "'w.q41'"});
  expect_bad(Bytes(full.begin(), full.end() - 1), {"'w.q41'", "outside"});
  expect_bad(Bytes{}, {"truncated", "magic"});
}

TEST_F(GgufBad, WrongMagic) {
  Bytes b = base_writer().bytes();
  b[0] = 'X';
  expect_bad(b, {"not a GGUF file"});
}

TEST_F(GgufBad, UnsupportedVersions) {
  GgufWriter w = base_writer();
  w.version = 1;
  expect_bad(w, {"version 1"});
  w.version = 99;
  expect_bad(w, {"unsupported GGUF version 99"});
  w.version = 0x03000000;
  expect_bad(w, {"big-endian"});
}

TEST_F(GgufBad, AbsurdCounts) {
  GgufWriter::Layout lay;
  const Bytes good = base_writer().bytes(&lay);
  Bytes b = good;
  GgufWriter::put_u64(b, lay.n_tensors, uint64_t(1) << 63);
  expect_bad(b, {"n_tensors", "9223372036854775808"});
  b = good;
  GgufWriter::put_u64(b, lay.n_kv, ~uint64_t(0) / 2);
  expect_bad(b, {"n_kv"});
  b = good;
  GgufWriter::put_u64(b, lay.n_kv, 5);  // one more than present: runs into the tensor infos
  expect_bad(b, {});
}

TEST_F(GgufBad, HugeStringLengths) {
  GgufWriter::Layout lay;
  const Bytes good = base_writer().bytes(&lay);
  Bytes b = good;
  GgufWriter::put_u64(b, lay.kv_key[1], uint64_t(1) << 62);  // key of entry #1
  expect_bad(b, {"metadata entry #1", "length 4611686018427387904"});
  b = good;
  GgufWriter::put_u64(b, lay.kv_type[0] + 4, ~uint64_t(0));  // string value
  expect_bad(b, {"'general.architecture'", "length"});
  b = good;
  GgufWriter::put_u64(b, lay.tensor_name[1], uint64_t(1) << 40);
  expect_bad(b, {"tensor info #1", "length"});
}

TEST_F(GgufBad, HugeArrayLengths) {
  GgufWriter::Layout lay;
  const Bytes good = base_writer().bytes(&lay);
  Bytes b = good;
  GgufWriter::put_u64(b, lay.kv_type[2] + 8, uint64_t(1) << 61);  // I32 array
  expect_bad(b, {"'arr'", "array length"});
  b = good;
  GgufWriter::put_u64(b, lay.kv_type[3] + 8, ~uint64_t(0));  // string array
  expect_bad(b, {"'strs'", "array length"});
}

TEST_F(GgufBad, UnknownValueAndElementTypes) {
  GgufWriter::Layout lay;
  const Bytes good = base_writer().bytes(&lay);
  Bytes b = good;
  GgufWriter::put_u32(b, lay.kv_type[1], 77);
  expect_bad(b, {"'general.alignment'", "unknown value type 77"});
  b = good;
  GgufWriter::put_u32(b, lay.kv_type[2] + 4, 13);
  expect_bad(b, {"'arr'", "unknown array element type 13"});
}

TEST_F(GgufBad, BadBool) {
  GgufWriter w;
  w.add_u8("fake", 0);
  GgufWriter::Layout lay;
  Bytes b = w.bytes(&lay);
  GgufWriter::put_u32(b, lay.kv_type[0], uint32_t(GgufType::BOOL));
  b[lay.kv_type[0] + 4] = 2;
  expect_bad(b, {"'fake'", "bool"});
}

TEST_F(GgufBad, NestedArraysTooDeep) {
  Bytes v = GgufWriter::encode_array(GgufType::U8, 1, {7});
  for (int i = 0; i < 5; ++i) v = GgufWriter::encode_array(GgufType::ARRAY, 1, v);
  GgufWriter w;
  w.add_raw("deep", GgufType::ARRAY, v);
  expect_bad(w, {"'deep'", "nested"});
}

TEST_F(GgufBad, Alignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufWriter w = base_writer();
    GgufWriter::Layout lay;
    Bytes b = w.bytes(&lay);
    GgufWriter::put_u32(b, lay.kv_type[1] + 4, a);
    expect_bad(b, {"general.alignment", std::to_string(a), "power of two"});
  }
  GgufWriter w;
  w.add_string("general.alignment", "32");
  expect_bad(w, {"general.alignment", "string"});
}

TEST_F(GgufBad, TooManyDims) {
  GgufWriter w = base_writer();
  w.add_tensor_raw("t5", 0, {1, 1, 1, 1, 1}, Bytes(4, 0));
  expect_bad(w, {"'t5'", "n_dims is 5"});
  GgufWriter z = base_writer();
  z.add_tensor_raw("t0", 0, {}, {});
  expect_bad(z, {"'t0'", "n_dims is 0"});
}

TEST_F(GgufBad, DimensionBeyondInt64) {
  GgufWriter w = base_writer();
  w.add_tensor_raw("big", 0, {4, uint64_t(1) << 63}, {});
  expect_bad(w, {"'big'", "int64"});
}

TEST_F(GgufBad, RowOrElementCountBeyondInt64) {
  // Zero-length rows: 0 bytes whatever the row count, which still must fit
  // (TensorView::rows(); the fuzz_gguf finding of 2026-11-29).
  GgufWriter w = base_writer();
  w.add_tensor_raw("rows", 0, {0, uint64_t(1) << 33, uint64_t(1) << 31}, {});
  expect_bad(w, {"'rows'", "row count overflows int64"});
  GgufWriter e = base_writer();  // rows fit, rows x cols do not
  e.add_tensor_raw("elems", 0, {uint64_t(1) << 40, uint64_t(1) << 30}, {});
  expect_bad(e, {"'elems'", "element count overflows int64"});
}

TEST_F(GgufBad, UnknownTensorType) {
  GgufWriter w = base_writer();
  w.add_tensor_raw("odd", 99, {32}, Bytes(128, 0));
  expect_bad(w, {"'odd'", "unknown tensor type 99"});
  // Kvasir's number for safetensors' FP8 is no GGML type.
  GgufWriter f = base_writer();
  f.add_tensor_raw("fp8", uint32_t(DType::F8_E4M3), {32}, Bytes(32, 0));
  expect_bad(f, {"'fp8'", "unknown tensor type 65536"});
}

TEST_F(GgufBad, RowNotMultipleOfBlock) {
  GgufWriter w = base_writer();
  w.add_tensor_raw("q", uint32_t(DType::Q4_1), {33, 2}, Bytes(80, 0));
  expect_bad(w, {"'q'", "row length 33", "Q4_1", "32"});
}

// MXFP4 (gpt-oss's experts, GGML type 39): 17 bytes per 32 weights. A row
// that is not whole blocks, a 3-D stack whose blocks wrap the size, and data
// that ends before the stack's last block are refused naming the tensor.
TEST_F(GgufBad, Mxfp4BlocksAndBounds) {
  GgufWriter w = base_writer();
  w.add_tensor_raw("exps", uint32_t(DType::MXFP4), {48, 2, 4}, Bytes(17 * 16, 0));
  expect_bad(w, {"'exps'", "row length 48", "MXFP4", "32"});
  GgufWriter q = base_writer();
  q.add_tensor_raw("wrap", uint32_t(DType::MXFP4), {uint64_t(1) << 62, 16, 32}, {});
  expect_bad(q, {"'wrap'", "overflows"});
  GgufWriter t = base_writer();  // 32 x 4 x 8 needs 17 * 32 bytes; 64 are there
  t.add_tensor_raw("short", uint32_t(DType::MXFP4), {32, 4, 8}, Bytes(64, 0));
  expect_bad(t, {"'short'", "outside"});
}

TEST_F(GgufBad, ByteSizeWraps) {
  GgufWriter w = base_writer();
  w.add_tensor_raw("wrap", uint32_t(DType::F32), {uint64_t(1) << 32, uint64_t(1) << 30}, {});
  expect_bad(w, {"'wrap'", "overflows"});
  GgufWriter q = base_writer();  // 2^57 blocks × 20 bytes × 16 rows wraps too
  q.add_tensor_raw("wrapq", uint32_t(DType::Q4_1), {uint64_t(1) << 62, 16}, {});
  expect_bad(q, {"'wrapq'", "overflows"});
}

TEST_F(GgufBad, OffsetPastEnd) {
  GgufWriter w = base_writer();
  w.add_tensor_raw("far", uint32_t(DType::F32), {8}, {}, uint64_t(1) << 20);
  expect_bad(w, {"'far'", "outside"});
  GgufWriter x = base_writer();  // offset + size wraps around 2^64
  x.add_tensor_raw("wrap", uint32_t(DType::F32), {64}, {}, ~uint64_t(0) - 31);
  expect_bad(x, {"'wrap'"});
}

TEST_F(GgufBad, OffsetNotAligned) {
  GgufWriter w = base_writer();
  w.add_tensor_raw("odd", uint32_t(DType::F32), {1}, {}, 4);
  expect_bad(w, {"'odd'", "offset 4", "alignment 32"});
}

TEST_F(GgufBad, DuplicateKey) {
  GgufWriter w = base_writer();
  w.add_u32("arr", 1);
  expect_bad(w, {"duplicate metadata key 'arr'"});
}

TEST_F(GgufBad, DuplicateTensor) {
  GgufWriter w = base_writer();
  w.add_tensor("w.f32", DType::F32, {4}, Bytes(16, 0));
  expect_bad(w, {"duplicate tensor name 'w.f32'"});
}

TEST_F(GgufBad, EmptyNames) {
  GgufWriter w;
  w.add_u32("", 1);
  expect_bad(w, {"metadata entry #0", "empty key"});
  GgufWriter t;
  t.add_tensor("", DType::F32, {1}, Bytes(4, 0));
  expect_bad(t, {"tensor info #0", "empty name"});
}

TEST_F(GgufBad, NotARegularFile) {
  test::expect_error([&] { GgufFile::open(dir_.path().string()); }, {"not a regular file"});
  test::expect_error([&] { GgufFile::open(dir_.file("absent.gguf")); }, {"cannot open"});
}

// Random byte corruption of the header and infos: either a clean open or a
// kvasir::Error, never a crash (run under the sanitizer build too).
TEST_F(GgufBad, RandomCorruptionNeverCrashes) {
  const std::string path = dir_.file("tiny.gguf");
  test::TinySpec spec;
  spec.layers = 1;
  spec.matrix_type = DType::Q4_1;
  test::write_tiny_gguf(path, spec);
  const Bytes full = test::read_bytes(path);
  const size_t head = size_t(GgufFile::open(path)->data_start());
  uint64_t s = 12345;
  auto next = [&] { return (s = s * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  int refused = 0;
  for (int iter = 0; iter < 300; ++iter) {
    Bytes b = full;
    const int flips = 1 + int(next() % 4);
    for (int k = 0; k < flips; ++k) b[next() % head] ^= uint8_t(1 + next() % 255);
    GgufWriter::write_file(path, b);
    try {
      GgufFile::open(path);
    } catch (const Error&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace kvasir
