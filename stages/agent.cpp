#include "stages/agent.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "base/check.h"
#include "base/log.h"
#include "stages/sampler.h"

namespace kvasir {
namespace {

void set_error(char* dst, size_t cap, const std::string& msg) {
  std::snprintf(dst, cap, "%s", msg.c_str());
}

}  // namespace

int run_agent(ipc::Segment& seg, const AgentConfig& cfg, const StageForward& forward) {
  const int s = cfg.stage, S = seg.n_stages();
  KV_CHECK(s >= 0 && s < S, "stage {} of {}", s, S);
  const bool head = s == 0, tail = s == S - 1;
  const ipc::SlotDims d = seg.dims();
  const int32_t block_size = seg.params().block_size;
  ipc::StageShared& me = seg.stage(s);
  ipc::Ring& in = seg.ring(s);
  ipc::Ring& out = seg.ring(s + 1);
  auto stop = [&] { return seg.stopping(); };

  std::vector<float> logits;
  if (tail) logits.resize(size_t(d.max_rows) * size_t(cfg.vocab));
  std::vector<ForwardRow> frows(size_t(d.max_rows));
  // Rows a GPU tail sampled on its device (ForwardBatch::sampled_token).
  std::vector<int32_t> dev_token(size_t(d.max_rows));
  std::vector<float> dev_logprob(size_t(d.max_rows));
  Sampler sampler;
  PenaltyHistories histories;  // the tail's, by position (stages/sampler.h)
  ipc::Batch b;
  uint64_t last_id = 0;

  while (!seg.stopping()) {
    ipc::BatchMsg m;
    int64_t t0 = ipc::now_ns();
    if (!in.pop(m, stop)) break;
    int64_t t1 = ipc::now_ns();
    me.stats.starved_ns.fetch_add(uint64_t(t1 - t0), std::memory_order_relaxed);

    // Whatever happens to this message, `passed` counts it once we are done
    // with it (pushed on or dropped): the bridge's drain check relies on it.
    auto pass = [&] { me.passed.fetch_add(1, std::memory_order_release); };
    // A batch of a dead epoch (a stage died while it was in the ring): its
    // sequences are being recomputed, so nothing downstream wants it and its
    // slot may already carry a new batch. Drop it without touching the slot.
    if (seg.stale(m.batch_id)) {
      me.stats.dropped.fetch_add(1, std::memory_order_relaxed);
      pass();
      continue;
    }
    me.phase.store(ipc::kPhaseBusy, std::memory_order_relaxed);
    Status why = ipc::check_msg(m, d, last_id);
    if (!why.ok()) {
      me.stats.refused.fetch_add(1);
      KV_LOG_WARN("agent", "refused a message: {}", why.message());
      // With a usable slot and id, fail that batch downstream so the bridge
      // hears of it; otherwise there is nothing safe to touch: drop it.
      if (m.slot >= uint32_t(d.inflight) || m.batch_id <= last_id) {
        me.phase.store(ipc::kPhaseIdle, std::memory_order_relaxed);
        pass();
        continue;
      }
      m.kind = ipc::kMsgBatch;
      m.version = ipc::kMsgVersion;
      m.status = int32_t(why.code());
      m.origin = s;
      set_error(seg.result(m.slot).hdr->error, sizeof(ipc::ResultHeader::error),
                fmt::format("stage {}: {}", s, why.message()));
      m.n_rows = std::clamp(m.n_rows, 0, d.max_rows);
    }
    last_id = m.batch_id;

    auto result = seg.result(m.slot);
    if (m.status == int32_t(ErrorCode::kOk)) {
      why = ipc::read_desc(seg.desc(m.slot), m, d, cfg.n_blocks, block_size, b);
      if (!why.ok()) {
        me.stats.refused.fetch_add(1);
        m.status = int32_t(why.code());
        m.origin = s;
        set_error(result.hdr->error, sizeof(ipc::ResultHeader::error),
                  fmt::format("stage {}: {}", s, why.message()));
      }
    }
    if (m.status == int32_t(ErrorCode::kOk)) {
      int n_sample = 0;
      for (int32_t r = 0; r < m.n_rows; ++r) {
        const ipc::DescRow& row = b.rows[r];
        frows[r] = ForwardRow{row.pos0, row.n_tokens, b.tables.data() + int64_t(r) * d.max_table,
                              row.n_table, row.sample != 0};
        n_sample += row.sample != 0;
      }
      ForwardBatch fb;
      fb.rows = frows.data();
      fb.n_rows = m.n_rows;
      fb.tokens = b.tokens.data();
      fb.n_tokens = m.n_tokens;
      fb.slot = m.slot;
      fb.batch_id = m.batch_id;
      if (tail) {
        std::fill_n(dev_token.begin(), m.n_rows, -1);
        fb.sampling = b.sampling.data();
        fb.sampled_token = dev_token.data();
        fb.sampled_logprob = dev_logprob.data();
      }
      try {
        forward(fb, head ? nullptr : seg.boundary(m.slot, s - 1),
                tail ? nullptr : seg.boundary(m.slot, s), tail ? logits.data() : nullptr);
        if (tail) {
          int k = 0, t_off = 0;
          for (int32_t r = 0; r < m.n_rows; ++r) {
            const ipc::DescRow& row = b.rows[r];
            const SamplingParams& sp = b.sampling[r];
            result.token[r] = -1;
            result.n_top[r] = 0;
            const SequenceHistory* hist = nullptr;
            bool lost = false;
            if (penalties_active(sp)) {
              hist = histories.feed(row.seq_id,
                                    PenaltyHistories::Row{row.pos0, row.n_tokens, row.n_prompt,
                                                          b.tokens.data() + t_off, row.pad != 0},
                                    m.batch_id);
              lost = hist == nullptr;
            }
            t_off += row.n_tokens;
            if (!row.sample) continue;
            float* row_logits = logits.data() + int64_t(k++) * cfg.vocab;
            if (dev_token[size_t(r)] >= 0) {  // sampled on the device: only its id came back
              result.token[r] = dev_token[size_t(r)];
              result.logprob[r] = dev_logprob[size_t(r)];
              continue;
            }
            if (lost) {
              // Its history was evicted: penalties without it would be
              // silently wrong. Token -1 fails this sequence alone.
              KV_LOG_ERROR("agent", "sequence {} lost its penalty history", row.seq_id);
              continue;
            }
            SampleResult sr =
                sampler.sample(row_logits, cfg.vocab, sp, hist, uint64_t(row.pos0 + row.n_tokens));
            KV_CHECK(!sr.all_masked, "row {} (sequence {}): every logit is NaN or -inf", r,
                     row.seq_id);
            result.token[r] = sr.token;
            result.logprob[r] = sr.logprob;
            result.n_top[r] = sr.n_top;
            for (int i = 0; i < sr.n_top && i < kMaxLogprobs; ++i)
              result.top[r * kMaxLogprobs + i] = ipc::TopLogprob{sr.top[i].first, sr.top[i].second};
          }
          (void)n_sample;
          if ((m.batch_id & 1023) == 0) histories.evict_older_than(m.batch_id);
        }
      } catch (const Error& e) {
        // The code of what failed (kDevice, kOutOfMemory, ...); a check on
        // the batch's own contents is the stage's failure to run it.
        m.status =
            int32_t(e.code() == ErrorCode::kInvalidArgument ? ErrorCode::kStageFailed : e.code());
        m.origin = s;
        set_error(result.hdr->error, sizeof(ipc::ResultHeader::error),
                  fmt::format("stage {}: {}", s, e.message()));
      } catch (const std::exception& e) {
        m.status = int32_t(ErrorCode::kStageFailed);
        m.origin = s;
        set_error(result.hdr->error, sizeof(ipc::ResultHeader::error),
                  fmt::format("stage {}: {}", s, e.what()));
      }
    }
    if (tail) {
      result.hdr->batch_id = m.batch_id;
      result.hdr->n_rows = m.n_rows;
      result.hdr->status = m.status;
    }
    int64_t t2 = ipc::now_ns();
    me.stats.busy_ns.fetch_add(uint64_t(t2 - t1), std::memory_order_relaxed);
    me.stats.batches.fetch_add(1, std::memory_order_relaxed);
    me.stats.tokens.fetch_add(uint64_t(m.n_tokens), std::memory_order_relaxed);
    me.last_busy_ns.store(uint64_t(t2 - t1), std::memory_order_relaxed);
    me.phase.store(ipc::kPhaseBlocked, std::memory_order_relaxed);
    if (!out.push(m, stop)) break;
    pass();
    me.phase.store(ipc::kPhaseIdle, std::memory_order_relaxed);
    me.stats.blocked_ns.fetch_add(uint64_t(ipc::now_ns() - t2), std::memory_order_relaxed);
  }
  return 0;
}

}  // namespace kvasir
