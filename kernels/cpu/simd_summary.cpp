// The one-line summary of the SIMD choices (simd.h): what a stage publishes
// for /kvasir/v1/stats and `kvasir status`.
#include <fmt/format.h>

#include <cctype>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cpu/amx.h"
#include "kernels/cpu/rows16.h"
#include "kernels/cpu/simd.h"

namespace kvasir::cpu {
std::string simd_type_name(DType type) {
  std::string out(dtype_name(type));
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

namespace {

std::string entry(const KernelChoice& c) {
  std::string e = fmt::format(" {}/{}:{}{}", simd_type_name(c.type), rows_class_name(c.rows),
                              simd_level_name(c.level), c.amx ? "+amx" : "");
  if (c.amx_packed_rows > 0) e += fmt::format("+p{}", c.amx_packed_rows);
  return e;
}

}  // namespace

std::string format_simd_summary(SimdLevel widest, bool amx_usable, bool forced,
                                SimdLevel forced_level, const std::vector<KernelChoice>& choices,
                                size_t max_len, const std::vector<DType>& rows16_types,
                                SimdLevel level) {
  static constexpr char kMore[] = " ...";
  std::string s = fmt::format("cpu:{} amx:{}", simd_level_name(widest), amx_usable ? "yes" : "no");
  if (forced) s += fmt::format(" forced:{}", simd_level_name(forced_level));
  std::vector<std::string> entries;
  if (!forced)
    for (DType t : rows16_types)
      entries.push_back(fmt::format(" {}/rows16:{}", simd_type_name(t), simd_level_name(level)));
  if (!forced)
    for (const KernelChoice& c : choices)
      if (c.reason != ChoiceReason::kPending) entries.push_back(entry(c));
  size_t total = s.size();
  for (const std::string& e : entries) total += e.size();
  const bool cut = total > max_len;
  const size_t room = cut ? (max_len >= sizeof kMore - 1 ? max_len - (sizeof kMore - 1) : 0) : max_len;
  bool dropped = false;
  for (const std::string& e : entries) {
    if (dropped || s.size() + e.size() > room) {
      dropped = true;
      continue;
    }
    s += e;
  }
  if (s.size() > room) s.resize(room);  // the head alone is too long: only a tiny max_len
  if (cut) s += kMore;
  if (s.size() > max_len) s.resize(max_len);
  return s;
}

std::string simd_summary(size_t max_len) {
  static std::mutex mu;
  static uint64_t generation = ~uint64_t(0);
  static SimdLevel level{};
  static bool forced = false;
  static size_t len = 0;
  static std::vector<DType> kept;
  static std::string cached;
  std::lock_guard<std::mutex> lock(mu);
  const uint64_t g = simd_choices_generation();
  const std::vector<DType> kept_now = detail::rows16_kept_types();
  if (g != generation || level != simd_level() || forced != simd_level_forced() || len != max_len ||
      kept != kept_now) {
    generation = g;
    level = simd_level();
    forced = simd_level_forced();
    len = max_len;
    kept = kept_now;
    cached = format_simd_summary(simd_level_supported(), detail::amx_usable(), forced, level,
                                 simd_kernel_choices(), max_len, kept, level);
  }
  return cached;
}

}  // namespace kvasir::cpu
