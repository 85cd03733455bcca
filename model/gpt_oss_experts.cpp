// model/gpt_oss_experts.cpp — see gpt_oss_experts.h.
#include "model/gpt_oss_experts.h"

#include <cstring>

#include "base/check.h"

namespace kvasir {
namespace {

constexpr int64_t kBlock = 32;       // FP4 codes per block
constexpr int64_t kCodeBytes = 16;   // their bytes
constexpr int64_t kGgufBlock = 17;   // scale + codes

std::string dims(const TensorView& t) {
  std::string s = "[";
  for (int i = t.n_dims - 1; i >= 0; --i) s += std::to_string(t.ne[i]) + (i ? ", " : "]");
  return s;
}

// t must be present, of `type` (any of F32/F16/BF16 when type is F32), with
// the outermost-first shape `want`.
void check_part(const TensorView* t, DType type, std::initializer_list<int64_t> want,
                const std::string& where, const char* part) {
  KV_CHECK_CODE(t, ErrorCode::kModelFormat, "{}: 'mlp.experts.{}' is missing", where, part);
  const bool float_ok =
      type == DType::F32 && (t->type == DType::F32 || t->type == DType::F16 || t->type == DType::BF16);
  KV_CHECK_CODE(t->type == type || float_ok, ErrorCode::kModelFormat,
                "{}: 'mlp.experts.{}' is {}, not {}", where, part, dtype_name(t->type),
                type == DType::F32 ? "F32, F16 or BF16" : dtype_name(type));
  bool ok = t->n_dims == int(want.size());
  int i = int(want.size());
  for (int64_t w : want) ok = ok && t->ne[--i] == w;
  std::string w = "[";
  for (int64_t v : want) w += std::to_string(v) + ", ";
  KV_CHECK_CODE(ok, ErrorCode::kModelFormat, "{}: 'mlp.experts.{}' has shape {}, the config implies {}]",
                where, part, dims(*t), w.substr(0, w.size() - 2));
}

// Rows [first, first + step, ...) of an expert-major [E][rows_in][blocks]
// source (codes and scales apart) into GGUF blocks, `rows` rows an expert.
void repack(const TensorView& blocks, const TensorView& scales, int32_t experts, int64_t rows_in,
            int64_t rows, int64_t first, int64_t step, int64_t n_blocks, std::vector<uint8_t>& out) {
  const uint8_t* codes = static_cast<const uint8_t*>(blocks.data);
  const uint8_t* exps = static_cast<const uint8_t*>(scales.data);
  out.resize(size_t(experts) * size_t(rows) * size_t(n_blocks) * kGgufBlock);
  uint8_t* o = out.data();
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t src_row = e * rows_in + first + r * step;
      for (int64_t b = 0; b < n_blocks; ++b, o += kGgufBlock) {
        const int64_t at = src_row * n_blocks + b;
        o[0] = exps[at];
        gpt_oss_codes_to_gguf(codes + at * kCodeBytes, o + 1);
      }
    }
}

}  // namespace

void gpt_oss_codes_to_gguf(const uint8_t* folder, uint8_t* gguf) {
  uint8_t v[kBlock];  // the 32 codes in element order
  for (int k = 0; k < kCodeBytes; ++k) v[2 * k] = folder[k] & 15, v[2 * k + 1] = folder[k] >> 4;
  for (int j = 0; j < kCodeBytes; ++j) gguf[j] = uint8_t(v[j] | (v[j + 16] << 4));
}

void gpt_oss_codes_to_folder(const uint8_t* gguf, uint8_t* folder) {
  uint8_t v[kBlock];
  for (int j = 0; j < kCodeBytes; ++j) v[j] = gguf[j] & 15, v[j + 16] = gguf[j] >> 4;
  for (int k = 0; k < kCodeBytes; ++k) folder[k] = uint8_t(v[2 * k] | (v[2 * k + 1] << 4));
}

GptOssExperts repack_gpt_oss_experts(const GptOssExpertSources& s, int32_t experts,
                                     int64_t hidden, int64_t ffn, const std::string& where) {
  KV_CHECK_CODE(hidden % kBlock == 0 && ffn % kBlock == 0, ErrorCode::kModelFormat,
                "{}: MXFP4 experts need hidden ({}) and the expert width ({}) in blocks of 32",
                where, hidden, ffn);
  const int64_t E = experts, hb = hidden / kBlock, fb = ffn / kBlock;
  check_part(s.gate_up_blocks, DType::U8, {E, 2 * ffn, hb, kCodeBytes}, where, "gate_up_proj_blocks");
  check_part(s.gate_up_scales, DType::U8, {E, 2 * ffn, hb}, where, "gate_up_proj_scales");
  check_part(s.gate_up_bias, DType::F32, {E, 2 * ffn}, where, "gate_up_proj_bias");
  check_part(s.down_blocks, DType::U8, {E, hidden, fb, kCodeBytes}, where, "down_proj_blocks");
  check_part(s.down_scales, DType::U8, {E, hidden, fb}, where, "down_proj_scales");
  GptOssExperts x;
  repack(*s.gate_up_blocks, *s.gate_up_scales, experts, 2 * ffn, ffn, 0, 2, hb, x.gate);
  repack(*s.gate_up_blocks, *s.gate_up_scales, experts, 2 * ffn, ffn, 1, 2, hb, x.up);
  repack(*s.down_blocks, *s.down_scales, experts, hidden, hidden, 0, 1, fb, x.down);
  x.gate_bias.resize(size_t(E * ffn));
  x.up_bias.resize(size_t(E * ffn));
  for (int64_t i = 0; i < E * ffn; ++i) {
    x.gate_bias[size_t(i)] = float_element(*s.gate_up_bias, 2 * i);
    x.up_bias[size_t(i)] = float_element(*s.gate_up_bias, 2 * i + 1);
  }
  return x;
}

}  // namespace kvasir
