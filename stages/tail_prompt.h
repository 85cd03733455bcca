// stages/tail_prompt.h — prompt logprobs at the tail (DescRow::prompt_logprobs,
// docs/api.md "Prompt logprobs"). A batch with a row that asks is run with
// every token's logits (ForwardBatch::all_logits); from them each asking
// row's prompt positions are scored into the result slot's PromptRecords,
// then the sampled rows' last logits are packed to the front, as the
// forward leaves them without all_logits, for the sampler.
#pragma once

#include <cstdint>

#include "ipc/batch.h"

namespace kvasir {

// Whether any of b's first n_rows rows asks for prompt logprobs.
bool wants_prompt_logprobs(const ipc::Batch& b, int32_t n_rows);

// Whether any of b's first n_rows rows carries drafts (DescRow::n_draft).
bool has_drafts(const ipc::Batch& b, int32_t n_rows);

// logits: [b.n_tokens, vocab], every token's. For each asking row, token
// index t of its positions p with p + 1 a prompt position: the record at
// out[t] scores the token at p + 1 (the row's next token, or the row's
// next_token after its last position) by the raw log-softmax of t's
// logits, its rank and the row's k top alternatives. Other indices of an
// asking row get position -1. A next token outside [0, vocab) is left
// out (position -1): the bridge checks the records against the prompt.
void score_prompt(const ipc::Batch& b, int32_t n_rows, const float* logits, int32_t vocab,
                  ipc::PromptRecord* out);

// Moves the last token's logits of every sampled row (a drafting row's
// last 1 + n_draft), in row order, to the front of logits, where the
// sampler reads them (TailSampler::Logits::rows).
void pack_sampled_logits(const ipc::Batch& b, int32_t n_rows, float* logits, int32_t vocab);

}  // namespace kvasir
