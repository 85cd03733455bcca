// base/cpu_list.cpp — see cpu_list.h.
#include "base/cpu_list.h"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "base/check.h"

namespace kvasir {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A whole decimal number below kMaxCpuIndex, or -1.
int cpu_number(std::string_view s) {
  s = trim(s);
  int v = -1;
  if (s.empty() || s.size() > 6) return -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0 || v >= kMaxCpuIndex) return -1;
  return v;
}

Status bad(std::string_view field, std::string_view text, std::string_view why) {
  return error_status(ErrorCode::kInvalidArgument,
                      "{}: \"{}\" is not a CPU list like \"0-15\" or \"0,2,4-7\" ({})", field,
                      text, why);
}

}  // namespace

Status parse_cpu_list(std::string_view text, std::string_view field, std::vector<int>& out) {
  out.clear();
  if (trim(text).empty()) return bad(field, text, "empty");
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view item = trim(text.substr(pos, comma - pos));
    if (item.empty()) return bad(field, text, "an empty item");
    const size_t dash = item.find('-');
    const int a = cpu_number(item.substr(0, dash));
    const int b = dash == std::string_view::npos ? a : cpu_number(item.substr(dash + 1));
    if (a < 0 || b < 0)
      return bad(field, text,
                 fmt::format("\"{}\": CPUs are numbers 0 to {}", item, kMaxCpuIndex - 1));
    if (b < a) return bad(field, text, fmt::format("\"{}\" runs backwards", item));
    for (int c = a; c <= b; ++c) out.push_back(c);
    pos = comma + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return Status();
}

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t* set = CPU_ALLOC(kMaxCpuIndex);
  const size_t bytes = CPU_ALLOC_SIZE(kMaxCpuIndex);
  if (!set) return cpus;
  CPU_ZERO_S(bytes, set);
  if (sched_getaffinity(0, bytes, set) == 0)
    for (int c = 0; c < kMaxCpuIndex; ++c)
      if (CPU_ISSET_S(size_t(c), bytes, set)) cpus.push_back(c);
  CPU_FREE(set);
  return cpus;
}

Status check_cpu_list(std::string_view text, std::string_view field, const std::vector<int>& allowed,
                      std::vector<int>& out) {
  KV_RETURN_IF_ERROR(parse_cpu_list(text, field, out));
  for (int c : out)
    if (!std::binary_search(allowed.begin(), allowed.end(), c))
      return error_status(ErrorCode::kInvalidArgument,
                          "{}: CPU {} of \"{}\" is not one this machine lets kvasird use ({})",
                          field, c, text, format_cpu_list(allowed));
  return Status();
}

Status pin_to_cpus(const std::vector<int>& cpus, std::string_view field) {
  // Sized for every CPU a list may name (the fixed cpu_set_t stops at 1024).
  cpu_set_t* set = CPU_ALLOC(kMaxCpuIndex);
  const size_t bytes = CPU_ALLOC_SIZE(kMaxCpuIndex);
  if (!set) return error_status(ErrorCode::kInternal, "{}: out of memory", field);
  CPU_ZERO_S(bytes, set);
  bool ok = !cpus.empty();
  for (int c : cpus) {
    if (c < 0 || c >= kMaxCpuIndex) ok = false;
    if (ok) CPU_SET_S(size_t(c), bytes, set);
  }
  ok = ok && sched_setaffinity(0, bytes, set) == 0;
  CPU_FREE(set);
  if (!ok)
    return error_status(ErrorCode::kInvalidArgument, "{}: cannot run on CPUs {} (now allowed: {})",
                        field, format_cpu_list(cpus), format_cpu_list(allowed_cpus()));
  return Status();
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return s;
}

}  // namespace kvasir
