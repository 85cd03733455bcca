// tests/unit/relay/relay_segs.h — what the relay's tests share: a leader's
// and a worker's segment from one plan, batches whose every byte depends on
// their id, and both relays over a UCX link on loopback.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "relay/relay.h"

namespace kvasir::testing {

using ipc::BatchMsg;
using ipc::BlockCopy;
using ipc::DescHeader;
using ipc::DescRow;
using ipc::DescView;
using ipc::Segment;
using ipc::SegmentParams;
using ipc::SlotDims;
using ipc::StagePlan;

inline constexpr int kInflight = 4;

// grammar_entries: a grammar table of that many 256-byte entries; stages
// of two layers each.
inline SegmentParams params(int32_t grammar_entries = 0, int32_t n_stages = 2) {
  SegmentParams p;
  p.grammar_entries = grammar_entries, p.grammar_capacity = grammar_entries > 0 ? 256 : 0;
  p.n_stages = n_stages;
  p.dims = SlotDims{4, 16, 8, 32, kInflight};
  p.block_size = 4;
  for (int32_t s = 0; s < n_stages; ++s) p.stages[s] = StagePlan{2 * s, 2 * s + 1, 1, "cpu"};
  std::strcpy(p.model_path, "/nonexistent");
  return p;
}

// A leader's and a worker's segment; `tag` tells two pairs of one test apart.
struct Segs {
  explicit Segs(int32_t grammar_entries = 0, const std::string& tag = "", int32_t n_stages = 2)
      : ln(Segment::name_for("relay-leader" + tag + std::to_string(getpid()))),
        wn(Segment::name_for("relay-worker" + tag + std::to_string(getpid()))),
        leader(Segment::create(ln, params(grammar_entries, n_stages))),
        worker(Segment::create(wn, params(grammar_entries, n_stages))) {}
  ~Segs() { Segment::remove(ln), Segment::remove(wn); }
  std::string ln, wn;
  std::unique_ptr<Segment> leader, worker;
};

inline uint8_t desc_byte(uint64_t id, uint64_t i) {
  return uint8_t(i * 13 + id * 5);
}
inline float hidden_value(uint64_t id, uint64_t i) {
  return float(i) * 0.5f + float(id);
}

inline BatchMsg msg_of(uint64_t id, int tokens = 5) {
  BatchMsg m;
  m.batch_id = id, m.slot = uint32_t(id % kInflight), m.n_rows = 2, m.n_tokens = tokens;
  return m;
}

// The bridge and stage 0 on the leader: descriptor bytes and boundary 0 of
// batch id. Every byte of the slot depends on the id; the counts that size
// the descriptor's parts (block copies, each row's table and biases) are
// then set in range, different per row.
inline void write_leader_side(Segment& seg, const BatchMsg& m) {
  const DescView v = seg.desc(m.slot);
  auto* d = reinterpret_cast<uint8_t*>(v.hdr);
  for (uint64_t i = 0; i < desc_bytes(seg.dims()); ++i) d[i] = desc_byte(m.batch_id, i);
  v.hdr->n_copies = int32_t(m.batch_id % 3);
  for (int r = 0; r < m.n_rows; ++r) {
    v.rows[r].n_table = int32_t((m.batch_id + 3 * uint64_t(r)) % 9);  // max_table 8
    v.sampling[r].n_logit_bias = uint16_t((m.batch_id + uint64_t(r)) % 4);
    v.sampling[r].grammar_entry = 0;  // unconstrained unless a test says otherwise
  }
  float* b = seg.boundary(m.slot, 0);
  for (uint64_t i = 0; i < uint64_t(m.n_tokens) * 32; ++i) b[i] = hidden_value(m.batch_id, i);
  seg.result(m.slot).hdr->stage_busy_ns[0] = 1000 + m.batch_id;
}

inline bool same(const void* a, const void* b, size_t n) {
  return std::memcmp(a, b, n) == 0;
}

// Whether the worker's slot holds what a stage reads of the leader's batch
// m: every part of the descriptor the batch uses, and its boundary rows.
inline ::testing::AssertionResult worker_holds(Segment& leader, Segment& worker,
                                               const BatchMsg& m) {
  const DescView a = leader.desc(m.slot), b = worker.desc(m.slot);
  const size_t rows = size_t(m.n_rows), mt = size_t(leader.dims().max_table);
  bool ok = same(a.hdr, b.hdr, sizeof(DescHeader)) &&
            same(a.rows, b.rows, sizeof(DescRow) * rows) &&
            same(a.tokens, b.tokens, 4 * size_t(m.n_tokens)) &&
            same(a.sampling, b.sampling, sizeof(SamplingParams) * rows) &&
            same(a.copies, b.copies, sizeof(BlockCopy) * size_t(a.hdr->n_copies));
  for (size_t r = 0; r < rows && ok; ++r)
    ok = same(a.tables + r * mt, b.tables + r * mt, 4 * size_t(a.rows[r].n_table)) &&
         same(a.bias + r * kMaxLogitBias, b.bias + r * kMaxLogitBias,
              sizeof(LogitBias) * a.sampling[r].n_logit_bias);
  if (!ok) return ::testing::AssertionFailure() << "the descriptor of batch " << m.batch_id;
  const float* bd = worker.boundary(m.slot, 0);
  for (uint64_t i = 0; i < uint64_t(m.n_tokens) * 32; ++i)
    if (bd[i] != hidden_value(m.batch_id, i))
      return ::testing::AssertionFailure() << "boundary value " << i << " of " << m.batch_id;
  return ::testing::AssertionSuccess();
}

// Both relays of `s` over loopback, each on a thread of its own (the
// worker's accepting, the leader's connecting), with the default options
// (first_remote 1, unless o says otherwise). join() waits for both: the leader's ends when s.leader
// shuts down, the worker's on the Bye it sends.
struct LoopbackRelays {
  explicit LoopbackRelays(Segs& s, relay::RelayOptions o = {}) {
    net::LinkOptions wo, lo;
    wo.role = net::Role::kWorker, wo.name = "worker-1";
    lo.role = net::Role::kLeader, lo.name = "leader";
    listened = net::UcxListener::listen("127.0.0.1", 0, key, wo, &listener).ok();
    if (!listened) return;
    worker = std::thread([this, &s, o] {
      std::unique_ptr<net::UcxLink> link;
      worker_end = listener->accept(10000, &link);
      if (worker_end.ok()) worker_end = relay::run_worker_relay(*s.worker, *link, o);
    });
    leader = std::thread([this, &s, o, lo, port = listener->port()] {
      std::unique_ptr<net::UcxLink> link;
      leader_end = net::UcxLink::connect("127.0.0.1", port, key, lo, &link);
      if (leader_end.ok()) leader_end = relay::run_leader_relay(*s.leader, *link, o);
    });
  }
  void join() {
    if (leader.joinable()) leader.join();
    if (worker.joinable()) worker.join();
  }

  const net::ClusterKey key{std::vector<uint8_t>(32, 0x5a)};
  std::unique_ptr<net::UcxListener> listener;
  bool listened = false;
  Status worker_end, leader_end;
  std::thread worker, leader;
};

}  // namespace kvasir::testing
