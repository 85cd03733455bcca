// ipc/batch.h — what travels through the ring: the message, the batch
// descriptor and the result, and the checks a receiver applies to each.
//
// Typed and versioned: every message carries kind and version; a receiver
// refuses anything else. Errors cross process boundaries as an ErrorCode
// (base/status.h) in the message's status plus a text in the batch's result
// slot, never as exceptions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "ipc/sampling.h"

namespace kvasir::ipc {

constexpr uint16_t kMsgBatch = 1;
// 2: DescRow gained n_prompt and pad. 3: status carries an ErrorCode.
// 4: the result slot carries each stage's busy time on the batch.
// 5: the descriptor gained block copies (parallel sampling's copy-on-write).
// 6: SamplingParams names a grammar-table entry. 7: the message carries the
// instant its producer pushed it (handoff accounting). 8: DescRow lost
// pad (`static` padding travels as rows of filler sequences). 9: top_logprobs
// up to 20 in the result slot; the descriptor carries each row's logit biases.
// 10: DescRow asks for prompt logprobs (prompt_logprobs, next_token), the
// result slot carries them (PromptRecord). 11: DescRow says how many of its
// last tokens are drafts (speculative decoding), the result slot carries the
// tokens their verification emitted (DraftRecord). 12: the result slot
// carries each constrained row's grammar-forced tokens (ForcedRecord). 13:
// with a sliding-window group (SlotDims::tables 2) each row carries a
// second table.
constexpr uint16_t kMsgVersion = 13;
// Stages whose time a result slot carries (the segment's kMaxStages).
constexpr int kMaxStageTimes = 16;

// One ring message: "the batch in slot `slot` is yours".
struct BatchMsg {
  uint16_t kind = kMsgBatch;
  uint16_t version = kMsgVersion;
  // An ErrorCode: kOk, or why the batch failed (kBatchRefused: a stage
  // found the message or descriptor malformed; kStageFailed, kDevice, ...:
  // its forward pass failed). Set once by the stage that failed it.
  int32_t status = 0;
  uint64_t batch_id = 0;  // strictly increasing per instance, starting at 1
  uint32_t slot = 0;
  int32_t n_rows = 0;
  int32_t n_tokens = 0;
  int32_t origin = -1;  // stage that set a non-ok status, or -1
  // CLOCK_MONOTONIC ns (ipc::now_ns) when the producer pushed it: the
  // consumer's handoff time (StageStats::handoff_ns). Untrusted like the
  // rest: a value in the future or absurdly old is not counted.
  int64_t sent_ns = 0;
};

// Widths of the slots, fixed at creation (the plan).
struct SlotDims {
  int32_t max_rows = 0;
  int32_t max_tokens = 0;
  int32_t max_table = 0;  // blocks per row's table
  int32_t hidden = 0;
  int32_t inflight = 0;
  // Block tables per row: 1, or 2 when the model's sliding-window layers
  // have a block id space of their own (docs/scheduler.md, "Sliding-window
  // groups"): the second, as long as the first, names the sliding group's
  // blocks, unmapped (-1) before the row's window.
  int32_t tables = 1;
};

struct DescHeader {
  uint64_t batch_id = 0;
  int32_t n_rows = 0;
  int32_t n_tokens = 0;
  int32_t n_copies = 0;  // block copies before the forward (at most max_rows)
  int32_t reserved = 0;
};

// A KV block copy (copy-on-write of a block shared by the choices of a
// parallel-sampling request, docs/scheduler.md): before it runs the batch's
// forward, every stage copies the K and V of block `src` to block `dst` in
// each of its own layers. src and dst in the pool, different; no dst twice,
// and no dst that is also a src, so the order of the copies does not matter.
struct BlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
};

struct DescRow {
  uint64_t seq_id = 0;
  int32_t pos0 = 0;
  int32_t n_tokens = 0;
  int32_t n_table = 0;
  // Positions below n_prompt hold the request's prompt, the rest tokens it
  // generated. A recompute after preemption resends both from position 0:
  // the tail needs the boundary to keep the penalties' history (prompt vs
  // output counts) what it was without the preemption.
  int32_t n_prompt = 0;
  uint8_t sample = 0;  // the tail samples this row's last token
  // Prompt logprobs (docs/api.md): 0 = off; k + 1 = the tail scores every
  // prompt token this row's positions predict (the token at position p + 1
  // from the logits at p) with k top alternatives, into the result slot's
  // PromptRecords at the row's token indices. k <= kMaxLogprobs.
  uint8_t prompt_logprobs = 0;
  // Speculative decoding (docs/speculative.md): the row's last n_draft
  // tokens are drafts, not yet the sequence's: the tail samples the target's
  // token at each of the last 1 + n_draft positions, in order, and stops at
  // the first that differs from the draft after it. Only on sampled rows;
  // n_draft < n_tokens. 0: an ordinary row.
  uint8_t n_draft = 0;
  uint8_t reserved = 0;
  // With prompt_logprobs: the prompt token after the row's last position
  // (its first in the next chunk), or -1 when the row reaches the prompt's
  // end: the last position's logits score it.
  int32_t next_token = -1;
};

struct TopLogprob {
  int32_t token = 0;
  float logprob = 0;
};

// One prompt position's logprob (DescRow::prompt_logprobs): the token at
// `position` (a prompt position >= 1), its raw logprob given the positions
// before it, its rank among the vocabulary (1 = the most likely), and the
// n_top most likely tokens there, highest first. position -1: no record.
struct PromptRecord {
  int32_t position = -1;
  int32_t token = 0;
  float logprob = 0;
  int32_t rank = 0;
  int32_t n_top = 0;
  TopLogprob top[kMaxLogprobs] = {};
};

// One token a drafting row's verification emitted past its first
// (DescRow::n_draft): the record at the token index of draft d_j holds the
// target's token t_j sampled from that index's logits (at position
// pos0 + index-in-row + 1), with its raw logprob and top alternatives as
// the row's first token has them. token -1: not emitted (an earlier draft
// was rejected). t_j is emitted only if t_{j-1} equals d_j.
struct DraftRecord {
  int32_t token = -1;
  float logprob = 0;
  int32_t n_top = 0;
  TopLogprob top[kMaxLogprobs] = {};
};

// The grammar-forced tokens after a constrained row's last emitted token
// (TailGrammar::forced: the string its grammar admits as the only way on,
// in vocabulary tokens): the scheduler's drafts for the sequence's next
// row. Written by the tail for sampled constrained rows when the instance
// drafts (SegmentParams::forced_drafts > 0); n = 0 elsewhere. Untrusted:
// n is clamped to [0, kMaxForced] and ids checked by the reader.
constexpr int kMaxForced = 16;
struct ForcedRecord {
  int32_t n = 0;
  int32_t token[kMaxForced] = {};
};

struct ResultHeader {
  uint64_t batch_id = 0;
  int32_t n_rows = 0;
  int32_t status = 0;  // an ErrorCode, as in BatchMsg
  char error[256] = {};
  // Stage s's busy time on this batch (ns: from taking it to being ready to
  // hand it on), written by stage s before it hands the batch on; the head
  // clears the others. The bridge's cost model is fitted from them
  // (daemon/engine/cost_model.h). Untrusted like the rest of the slot.
  uint64_t stage_busy_ns[kMaxStageTimes] = {};
};

// A descriptor slot in the segment, as typed pointers into it. Layout:
// DescHeader | DescRow[max_rows] | int32 tokens[max_tokens] |
// int32 tables[max_rows][max_table] | (tables 2: int32 swa_tables[max_rows][max_table]) |
// SamplingParams[max_rows] | BlockCopy[max_rows] | LogitBias[max_rows][kMaxLogitBias]
struct DescView {
  DescHeader* hdr = nullptr;
  DescRow* rows = nullptr;
  int32_t* tokens = nullptr;
  int32_t* tables = nullptr;      // row r's table at tables + r * max_table
  int32_t* swa_tables = nullptr;  // its sliding table, the same way (null: tables 1)
  SamplingParams* sampling = nullptr;
  BlockCopy* copies = nullptr;
  // Row r's sampling[r].n_logit_bias entries at bias + r * kMaxLogitBias
  // (2.4 KB a row: the slot stays a fixed function of the plan).
  LogitBias* bias = nullptr;
};

// What a sampled row's token says when the tail could not sample it (a
// sampled token is never negative):
//   kTokenFailed          the tail failed the sequence (a lost record, no
//                         grammar engine): the engine's fault, kBadResult;
//   kTokenGrammarRefused  the request's own structured-output spec cannot
//                         go on (it allows no token here, or it could not
//                         be compiled within its deadline): the client's
//                         fault, kInvalidArgument.
constexpr int32_t kTokenFailed = -1;
constexpr int32_t kTokenGrammarRefused = -2;

// A result slot. Layout: ResultHeader | int32 token[max_rows] |
// float logprob[max_rows] | int32 n_top[max_rows] | TopLogprob[max_rows][kMaxLogprobs] |
// PromptRecord[max_tokens] | DraftRecord[max_tokens] | ForcedRecord[max_rows]
struct ResultView {
  ResultHeader* hdr = nullptr;
  int32_t* token = nullptr;
  float* logprob = nullptr;
  int32_t* n_top = nullptr;
  TopLogprob* top = nullptr;  // row r's at top + r * kMaxLogprobs
  // Prompt logprobs, by the batch's token index: the record of token
  // index t scores the prompt token after t's position. Written by the
  // tail for the rows that ask (DescRow::prompt_logprobs) only.
  PromptRecord* prompt = nullptr;
  // Speculative decoding, by the batch's token index: written by the tail
  // at the draft tokens' indices of the rows with n_draft > 0 only.
  DraftRecord* draft = nullptr;
  // Grammar-forced tokens, by row (ForcedRecord).
  ForcedRecord* forced = nullptr;
};

uint64_t desc_bytes(const SlotDims& d);
uint64_t result_bytes(const SlotDims& d);
DescView desc_view(void* base, const SlotDims& d);
ResultView result_view(void* base, const SlotDims& d);

// A descriptor copied out of the segment (so a peer cannot change it under
// the reader), ready for validation and use.
struct Batch {
  uint64_t batch_id = 0;
  std::vector<DescRow> rows;
  std::vector<int32_t> tokens;
  // At least rows.size() × max_table: row r's n_table ids from r × max_table
  // (read_desc leaves what lies past them stale).
  std::vector<int32_t> tables;
  // With SlotDims::tables 2, each row's sliding table laid out as `tables`
  // (the row's n_table entries, -1 where unmapped); else empty.
  std::vector<int32_t> swa_tables;
  std::vector<SamplingParams> sampling;
  std::vector<BlockCopy> copies;  // applied before the forward
  // At least rows.size() × kMaxLogitBias: row r's sampling[r].n_logit_bias
  // entries from r × kMaxLogitBias (the rest stale, as with tables).
  std::vector<LogitBias> bias;
  int32_t n_tokens = 0;

  std::span<const LogitBias> row_bias(int32_t r) const {
    const size_t n = sampling[size_t(r)].n_logit_bias;
    if (n == 0) return {};
    return {bias.data() + int64_t(r) * kMaxLogitBias, n};
  }
};

// Checks a message against the widths and the last batch id this receiver
// saw (ids must increase). Not ok: kBatchRefused and why.
Status check_msg(const BatchMsg& m, const SlotDims& d, uint64_t last_batch_id);

// Copies the descriptor of m.slot and checks it against the message and the
// widths: same batch id and counts, rows' tokens sum to n_tokens, each row
// has >= 1 token and at most kMaxLogitBias logit biases, a table long enough for its positions,
// block ids in [0, n_blocks), block copies as BlockCopy says, n_draft only on sampled rows
// and below n_tokens; with a sliding table (d.tables 2), its ids in [0, n_blocks_swa) after
// a run of unmapped (-1) entries that ends at or before the row's first position's block.
// Only each row's n_table ids are
// copied, into out's buffers as the previous call left them. Not ok: kBatchRefused and why (out is
// then unspecified).
Status read_desc(const DescView& v, const BatchMsg& m, const SlotDims& d, int32_t n_blocks,
                 int32_t block_size, Batch& out, int32_t n_blocks_swa = 0);

// Writes a descriptor (bridge side). The batch must already be valid.
void write_desc(const DescView& v, const Batch& b, const SlotDims& d);

}  // namespace kvasir::ipc
