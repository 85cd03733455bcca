#include "base/dtype.h"

namespace kvasir {
namespace {

constexpr DTypeInfo kTypes[] = {
    {DType::F32, "F32", 1, 4, true},       {DType::F16, "F16", 1, 2, true},
    {DType::Q4_0, "Q4_0", 32, 18, true},   {DType::Q4_1, "Q4_1", 32, 20, true},
    {DType::Q5_0, "Q5_0", 32, 22, true},   {DType::Q5_1, "Q5_1", 32, 24, false},
    {DType::Q8_0, "Q8_0", 32, 34, true},   {DType::Q8_1, "Q8_1", 32, 36, false},
    {DType::Q2_K, "Q2_K", 256, 84, false}, {DType::Q3_K, "Q3_K", 256, 110, false},
    {DType::Q4_K, "Q4_K", 256, 144, true}, {DType::Q5_K, "Q5_K", 256, 176, true},
    {DType::Q6_K, "Q6_K", 256, 210, true}, {DType::Q8_K, "Q8_K", 256, 292, false},
    {DType::I8, "I8", 1, 1, false},        {DType::I16, "I16", 1, 2, false},
    {DType::I32, "I32", 1, 4, false},      {DType::I64, "I64", 1, 8, false},
    {DType::F64, "F64", 1, 8, false},      {DType::BF16, "BF16", 1, 2, true},
    {DType::MXFP4, "MXFP4", 32, 17, true}, {DType::F8_E4M3, "F8_E4M3", 1, 1, false},
    {DType::U8, "U8", 1, 1, false},
};

}  // namespace

const DTypeInfo* dtype_info(uint32_t raw) {
  for (const auto& t : kTypes)
    if (static_cast<uint32_t>(t.type) == raw) return &t;
  return nullptr;
}

const DTypeInfo& dtype_info(DType t) {
  return *dtype_info(static_cast<uint32_t>(t));
}

std::optional<uint64_t> dtype_row_bytes(DType t, int64_t n) {
  const DTypeInfo* info = dtype_info(static_cast<uint32_t>(t));
  if (!info || n < 0 || n % info->block != 0) return std::nullopt;
  uint64_t blocks = uint64_t(n / info->block), out;
  if (__builtin_mul_overflow(blocks, uint64_t(info->bytes), &out)) return std::nullopt;
  return out;
}

std::optional<uint64_t> dtype_tensor_bytes(DType t, const int64_t* ne, int n_dims) {
  if (n_dims < 1) return std::nullopt;
  auto row = dtype_row_bytes(t, ne[0]);
  if (!row) return std::nullopt;
  uint64_t total = *row;
  for (int i = 1; i < n_dims; ++i) {
    if (ne[i] < 0 || __builtin_mul_overflow(total, uint64_t(ne[i]), &total)) return std::nullopt;
  }
  return total;
}

}  // namespace kvasir
