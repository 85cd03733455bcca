// daemon/engine/batch_log.h — one line per micro-batch: where the ring's time goes.
//
// `[log] batches = "FILE"` (docs/config.md) makes the bridge write, for
// every result it reads from the tail, a JSON line: when the micro-batch
// entered the ring and when its result came back, what it carried (decode
// rows, prompt tokens, sampled rows) and each stage's busy time on it. The
// stats' counters say how busy each stage was; this says when and on what,
// so an idle second can be traced to its cause (an empty ring, a slow
// turnaround in the bridge, micro-batches of unequal cost, a phase of the
// load that one stage carries more of). bench/policies/batchlog.py reads it.
//
// Written by the engine thread only, flushed line by line (a reader may
// follow the file while the daemon runs). Times are seconds on the
// monotonic clock the stages stamp with (ipc::now_ns), comparable within
// one boot.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "daemon/engine/scheduler.h"

namespace kvasir {

// What one micro-batch carried, counted from the SchedulerOutput it was.
struct BatchCounts {
  int32_t rows = 0;
  int64_t tokens = 0;         // every position computed
  int32_t decode_rows = 0;    // one position past the prompt, sampled
  int64_t prompt_tokens = 0;  // positions inside their request's prompt
  int32_t sampled = 0;        // rows whose last position is sampled
  int64_t pad_tokens = 0;     // `static` filler positions
};
BatchCounts count_batch(const SchedulerOutput& out);

struct BatchRecord {
  uint64_t batch = 0;  // the ring's batch id
  uint32_t slot = 0;
  double submit_s = 0, done_s = 0;  // into the ring; result read by the bridge
  BatchCounts counts;
  std::vector<double> stage_busy_s;  // per stage; <= 0: not reported
  bool ok = true;                    // false: the batch failed (its status names why)
  ErrorCode error = ErrorCode::kOk;
};

class BatchLog {
 public:
  // Creates or truncates `path`. kIo with the system's reason if it cannot.
  static Status open(const std::string& path, std::unique_ptr<BatchLog>* out);
  ~BatchLog();
  BatchLog(const BatchLog&) = delete;
  BatchLog& operator=(const BatchLog&) = delete;

  // Appends one JSON line and flushes it. A write error is counted, not
  // thrown: the log never stops the engine.
  void write(const BatchRecord& r);
  uint64_t write_errors() const { return write_errors_; }

 private:
  explicit BatchLog(std::FILE* f) : f_(f) {}
  std::FILE* f_;
  uint64_t write_errors_ = 0;
};

}  // namespace kvasir
