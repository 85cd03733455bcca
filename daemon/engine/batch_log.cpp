#include "daemon/engine/batch_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kvasir {

BatchCounts count_batch(const SchedulerOutput& out) {
  BatchCounts c;
  for (const ScheduledRow& r : out.rows) {
    ++c.rows;
    c.tokens += r.n_tokens;
    if (r.pad) {
      c.pad_tokens += r.n_tokens;
      continue;
    }
    c.sampled += r.sample;
    // Positions below n_prompt are the prompt's; a recomputed sequence
    // (after a preemption or a lost stage) also recomputes its output, which
    // counts in `tokens` only.
    c.prompt_tokens += std::clamp<int64_t>(int64_t(r.n_prompt) - r.pos0, 0, r.n_tokens);
    c.decode_rows += r.sample && r.n_tokens - r.n_draft == 1 && r.pos0 >= r.n_prompt;
  }
  return c;
}

Status BatchLog::open(const std::string& path, std::unique_ptr<BatchLog>* out) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f)
    return Status(ErrorCode::kIo,
                  fmt::format("log.batches: cannot write '{}': {}", path, std::strerror(errno)));
  out->reset(new BatchLog(f));
  return Status();
}

BatchLog::~BatchLog() {
  std::fclose(f_);
}

void BatchLog::write(const BatchRecord& r) {
  const BatchCounts& c = r.counts;
  std::string line = fmt::format(
      "{{\"batch\":{},\"slot\":{},\"submit_s\":{:.6f},\"done_s\":{:.6f},\"rows\":{},"
      "\"tokens\":{},\"decode_rows\":{},\"prompt_tokens\":{},\"sampled\":{},\"pad_tokens\":{},"
      "\"stage_busy_s\":[",
      r.batch, r.slot, r.submit_s, r.done_s, c.rows, c.tokens, c.decode_rows, c.prompt_tokens,
      c.sampled, c.pad_tokens);
  for (size_t i = 0; i < r.stage_busy_s.size(); ++i)
    line += fmt::format("{}{:.6f}", i ? "," : "", r.stage_busy_s[i]);
  line += fmt::format("],\"ok\":{}", r.ok ? "true" : "false");
  if (!r.ok) line += fmt::format(",\"error\":\"{}\"", error_code_name(r.error));
  line += "}\n";
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
    ++write_errors_;
}

}  // namespace kvasir
