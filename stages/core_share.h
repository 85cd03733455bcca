// stages/core_share.h — the CPU stages of one instance share the machine's
// cores by need.
//
// Every CPU plan on one machine puts several stages on the same cores. A
// fixed split (each stage `threads` = cores / stages) leaves one request
// at half speed: while stage 0 computes its token, stage 1 has nothing to
// do and its cores idle. So each CPU stage may hold up to all the cores'
// threads, and at every parallel kernel call a stage takes the cores the
// other busy CPU stages are not using (their phase, which the segment
// publishes: ipc/segment.h StageShared::phase). One request's stages then
// take turns on all the cores; under load, when every stage is busy, each
// gets its share and nothing is oversubscribed. Idle pool threads sleep
// (kernels/cpu/thread_pool.h), so a stage without a batch costs nothing.
#pragma once

#include <vector>

#include "ipc/segment.h"

namespace kvasir {

class CoreShare {
 public:
  // self: this stage; cores: the CPUs this process may use. threads[i]:
  // the most threads CPU stage i uses (0 for a GPU stage, which is not
  // counted).
  CoreShare(ipc::Segment& seg, int self, int cores, std::vector<int> threads);

  // Threads for this stage's next kernel call: the cores minus what the
  // other busy CPU stages claim (each at most its fair share, cores / busy
  // stages with this one counted, and at most its own threads), clamped to
  // [1, threads[self]].
  int width() const;

 private:
  ipc::Segment& seg_;
  int self_;
  int cores_;
  std::vector<int> threads_;
};

}  // namespace kvasir
