// daemon/engine/descriptor.h — a micro-batch as the ring's descriptor
// (ipc/batch.h), the bridge's half of the encoding. Internal to the bridge;
// bench/engine/bench_step times it.
#pragma once

#include <cstdint>

#include "daemon/engine/scheduler.h"
#include "ipc/batch.h"

namespace kvasir {

// Fills `b` with out's rows, tokens, block tables and sampling, under
// `batch_id`, ready for ipc::write_desc with a slot whose tables are
// `max_table` wide. b's buffers are reused from its previous batch: once
// they are big enough nothing is allocated, and the tables are not
// zero-filled (row r's ids are b.tables[r·max_table, + its n_table); what
// lies past them is stale, and neither write_desc nor read_desc reads
// it). A row's logit biases go to b.bias[r·kMaxLogitBias, + their count)
// and the count into its sampling.n_logit_bias. Grammar entries are the
// bridge's to place (sampling as the rows carry it). Every row's table fits max_table (the bridge
// refused longer requests). tables 2 (a sliding group, ipc::SlotDims::tables): each row's
// sliding table into b.swa_tables the same way.
void encode_batch(const SchedulerOutput& out, uint64_t batch_id, int32_t max_table, ipc::Batch& b,
                  int32_t tables = 1);

}  // namespace kvasir
