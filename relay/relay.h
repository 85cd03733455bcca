// relay/relay.h — a ring link that crosses hosts: the pseudo-stage on each
// side of it (docs/multi-host.md, "The relay").
//
// Both hosts create a segment from the same plan, so every stage keeps its
// global index. A worker runs a contiguous slice r..e-1 of the stages
// (1 <= r < e <= S); the leader runs the rest, one relay per slice.
//
//   stage r-1 ─▶ ring r ─▶ leader relay ══ Batch ══▶ worker relay ─▶ ring r ─▶ stage r
//   tail ─▶ ring S ─▶ worker relay ══ Result ══▶ leader relay ─▶ ring S ─▶ bridge   (e == S)
//   stage e-1 ─▶ ring e ─▶ worker relay ══ Hidden ══▶ leader relay ─▶ ring e ─▶ stage e (e < S)
//   (each ring in its own host's segment)
//
// The bridge keeps every decision (membership, widths, ids, slots) and the
// credits (the slots): the worker's slot k is a mirror that lives while
// batch k is on the worker. Everything a frame carries is untrusted, as a
// ring message is: checked against the plan's widths before it touches a
// slot.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "ipc/segment.h"
#include "net/ucx_link.h"
#include "net/wire.h"

namespace kvasir::relay {

struct RelayOptions {
  int first_remote = 1;  // r: the worker's first stage; 1 <= r < n_stages
  // e: the stage after the worker's last, r < e <= n_stages; 0: n_stages
  // (the slice ends at the tail, and Result frames come back). Below
  // n_stages, stage e-1 pushes on ring e, and Hidden frames carry the
  // batch back to the leader's stage e.
  int end = 0;
  // The longest a relay sleeps before it looks at its stop flag and the
  // link's liveness. Not a latency: a message on its ring or a frame on
  // its link wakes it at once (relay/ring_or_link.h).
  int64_t poll_ns = 20'000'000;
  // Sleep in one io_uring wait on the ring's bell and the link where the
  // kernel allows it; false: the watcher thread always (what the
  // fallback does, for comparisons).
  bool one_wait = true;
  // Worker: the listener its leader came through, or null. While it
  // serves, the worker's relay answers anyone else who connects there: a
  // peer without the key is refused and logged by the listener (net/), one
  // with it is told this worker already serves a leader. The listener
  // shares the link's UCX worker, so the relay's thread drives both; a peer
  // that connects and stays silent holds that thread up to the listener's
  // handshake_timeout_ms.
  net::UcxListener* listener = nullptr;
  // Leader: a Ping every ping_ns (0: none), answered by the worker's relay.
  // Either side: nothing from the peer for silence_ns (0: no limit) ends
  // the link (kTimeout): a host that vanished without closing its
  // connection (power, network) is a loss too, not a silent stall, and a
  // worker whose leader vanished is free for the next one. A worker's
  // limit needs a leader that pings more often than that.
  int64_t ping_ns = 0;
  int64_t silence_ns = 0;
  // Where the loop publishes, at each poll, the link's bytes so far and
  // the last Ping's round trip (null: nowhere), for the daemon's stats.
  std::atomic<uint64_t>* bytes_sent = nullptr;
  std::atomic<uint64_t>* bytes_received = nullptr;
  std::atomic<int64_t>* rtt_ns = nullptr;
  // Worker: asked when the loop ends because the segment stops. Not ok: a
  // stage of this host ended on its own (the worker stops the segment
  // then), and the session ends with a Refuse saying so instead of a Bye,
  // so the leader's loss names the cause. Null: always a Bye.
  std::function<Status()> local_fault;
};

// The conversions, apart from the loops so that tests drive every check.
//
// Leader: the Batch frame for message m as it lies in seg: its fields,
// descriptor slot m.slot cut to what the batch uses (the header, its rows,
// tokens, sampling parameters and block copies, each row's table entries
// and logit biases; copied into *buf, which the frame's view points into),
// and Boundary[m.slot][r-1] [m.n_tokens, hidden] f32 (a view into seg).
// m must pass ipc::check_msg; a descriptor whose counts are out of range
// is kBatchRefused, as a stage would refuse it.
Status make_batch_frame(ipc::Segment& seg, int r, const ipc::BatchMsg& m, std::vector<uint8_t>* buf,
                        net::Batch* out);
// Worker: checks f (the message against the widths and last_id, the
// boundary's shape, the descriptor's counts against the widths and its
// size against its counts), rebuilds descriptor slot f.slot from it, copies
// Boundary[f.slot][r-1], clears the slot's stage times (the
// head's job on one host) and sets *out to the message to push on ring r.
Status take_batch_frame(ipc::Segment& seg, int r, const net::Batch& f, uint64_t last_id,
                        ipc::BatchMsg* out);
// Worker: the Result frame for the message the tail pushed on ring S: the
// parts of result slot m.slot the batch fills (its header, its rows'
// tokens and alternatives, and the prompt, draft and forced records only
// where its descriptor asks for them), copied into *buf, which the frame's
// view points into.
Status make_result_frame(ipc::Segment& seg, const ipc::BatchMsg& m, std::vector<uint8_t>* buf,
                         net::Result* out);
// Leader: checks f against the batch it sent for that slot (its size
// against the parts that batch's descriptor asks for), writes its parts
// into result slot f.slot but keeps the busy times stages 0..r-1 wrote
// there, and sets *out to the message for the bridge (sent, with the
// tail's status).
Status take_result_frame(ipc::Segment& seg, int r, const net::Result& f, const ipc::BatchMsg& sent,
                         ipc::BatchMsg* out);

// A slice r..e-1 that ends before the tail (e < S) hands each batch back
// to the leader's stage e, which reads Boundary[k][e-1] there.
//
// Worker: the Hidden frame for the message stage e-1 pushed on ring e: the
// message (a stage that failed it set its status and origin; then the
// result slot's error text too), the busy times stages r..e-1 wrote into
// result slot m.slot, and Boundary[m.slot][e-1] [m.n_tokens, hidden] f32
// (a view into seg).
Status make_hidden_frame(ipc::Segment& seg, int r, int e, const ipc::BatchMsg& m, net::Hidden* out);
// Leader: checks f against the batch it sent for that slot (id, slot,
// kind, version, rows, tokens, the stage range, the boundary's shape, and
// a status the leader had set kept as it was), writes Boundary[f.slot][e-1],
// the busy times of stages r..e-1 into result slot f.slot (and the error
// text when a worker stage failed the batch), and sets *out to the message
// to push on ring e.
Status take_hidden_frame(ipc::Segment& seg, int r, int e, const net::Hidden& f,
                         const ipc::BatchMsg& sent, ipc::BatchMsg* out);

// Grammar specs (ipc/grammar_table.h) cross with the batches that use
// them: the bridge writes an entry once into the leader's table and rows
// name it; the worker's tail reads the worker's table.
//
// Leader: the Grammar frames the worker needs before batch m — one for
// each entry a row of m names (SamplingParams::grammar_entry, 1 + the
// table's index; a frame carries the index) under an id other than
// sent[index] (what
// this link has carried to it), each entry once — read from seg's table as
// the tail would read it (version, length, checksum). The frames' views
// point into *specs; the caller records each frame in sent once it has
// gone. A row naming an entry out of range, or one that does not hold its
// id, is kBatchRefused. sent.size() is seg.params().grammar_entries.
Status make_grammar_frames(ipc::Segment& seg, const ipc::BatchMsg& m,
                           const std::vector<uint64_t>& sent, std::vector<std::string>* specs,
                           std::vector<net::Grammar>* out);
// Worker: writes f into entry f.entry of seg's table, once f is checked
// against the plan (the entry in range, the spec within the capacity). The
// leader sends a new id for an entry only when no batch in the ring names
// it (the bridge's rule), so no batch on this side reads it meanwhile.
Status take_grammar_frame(ipc::Segment& seg, const net::Grammar& f);

// The loops. Each runs on one thread until the segment stops, the peer
// says Bye (both ok), or the link fails or the peer breaks the protocol
// (the Status says which; the link is then ended).
//
// Leader: the consumer of ring r and the producer of ring e in place of
// stages r..e-1 (stage r's `passed` counts a batch once it is back, so
// Segment::drained() sees the batches on the worker). A batch the relay
// refuses goes on ring e failed, where the next stage passes it on.
Status run_leader_relay(ipc::Segment& seg, net::UcxLink& link, const RelayOptions& o);
// Worker: the producer of ring r and the consumer of ring e.
Status run_worker_relay(ipc::Segment& seg, net::UcxLink& link, const RelayOptions& o);

}  // namespace kvasir::relay
