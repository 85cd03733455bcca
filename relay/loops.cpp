// relay/loops.cpp — the relays' threads: a ring on one side, a link on the
// other (relay/relay.h).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/log.h"
#include "relay/relay.h"
#include "relay/ring_or_link.h"

namespace kvasir::relay {
namespace {

// A frame that ends the loop: Bye (ok), Refuse (the peer's reason), or one
// this side does not take here.
Status unexpected(const net::Frame& f, const char* side) {
  if (const auto* r = std::get_if<net::Refuse>(&f.payload))
    return error_status(r->code, "relay: the peer refused: {}", r->text);
  return error_status(ErrorCode::kInvalidArgument, "relay ({}): a {} frame", side,
                      net::frame_type_name(f.header.type));
}

// Ends the link with a Refuse saying why, then returns why.
Status refuse(net::UcxLink& link, Status why) {
  (void)link.send(net::Refuse{why.code(), why.message()});
  (void)link.close();
  return why;
}

// The same for a fault of this side's own (a stage that ended), waiting up
// to a second for the peer to end the link first: a close with our read
// still posted aborts the endpoint, and the peer may hear the abort before
// the Refuse that names the cause.
Status refuse_and_wait(net::UcxLink& link, Status why) {
  if (link.send(net::Refuse{why.code(), why.message()}).ok()) {
    const int64_t until = ipc::now_ns() + 1'000'000'000;
    net::Frame f;
    while (ipc::now_ns() < until && link.recv(50, &f).code() == ErrorCode::kTimeout) {
    }
  }
  (void)link.close();
  return why;
}

// The link's liveness: the leader's Pings, one every o.ping_ns, the round
// trip of each Pong published; either side ends the link when nothing came
// from the peer in o.silence_ns (a host gone without closing its
// connection). Also publishes the link's byte counts.
struct Liveness {
  const RelayOptions& o;
  int64_t last_sent = 0, last_heard = ipc::now_ns();
  Status tick(net::UcxLink& link) {
    if (o.bytes_sent) o.bytes_sent->store(link.bytes_sent(), std::memory_order_relaxed);
    if (o.bytes_received) o.bytes_received->store(link.bytes_received(), std::memory_order_relaxed);
    const int64_t now = ipc::now_ns();
    if (o.silence_ns > 0 && now - last_heard > o.silence_ns)
      return error_status(ErrorCode::kTimeout, "relay: nothing from the peer in {:.1f} s",
                          double(o.silence_ns) / 1e9);
    if (o.ping_ns <= 0 || now - last_sent < o.ping_ns) return Status();
    last_sent = now;
    return link.send(net::Ping{now});
  }
  void heard() { last_heard = ipc::now_ns(); }
  void pong(int64_t sent_ns) {
    if (o.rtt_ns && sent_ns > 0) o.rtt_ns->store(last_heard - sent_ns, std::memory_order_relaxed);
  }
};

// Every frame the link holds now, without waiting, through on_frame (a
// Status that is not ok ends the loop). Ping is answered here.
template <class OnFrame>
Status drain_link(net::UcxLink& link, bool* bye, Liveness& live, OnFrame&& on_frame) {
  KV_RETURN_IF_ERROR(live.tick(link));
  for (;;) {
    net::Frame f;
    Status s = link.recv(0, &f);
    if (s.code() == ErrorCode::kTimeout) return Status();
    KV_RETURN_IF_ERROR(s);
    live.heard();
    if (const auto* p = std::get_if<net::Ping>(&f.payload)) {
      KV_RETURN_IF_ERROR(link.send(net::Pong{p->sent_ns}));
    } else if (const auto* q = std::get_if<net::Pong>(&f.payload)) {
      live.pong(q->sent_ns);
    } else if (std::holds_alternative<net::Bye>(f.payload)) {
      *bye = true;
      return Status();
    } else {
      KV_RETURN_IF_ERROR(on_frame(f));
    }
  }
}

// The next message on `in`, or false once stop() says so. While the ring
// is empty, stop() drains the link (the frames are handled there), then
// the relay sleeps until its ring's bell or its link wakes it
// (relay/ring_or_link.h); w.poll_ns bounds the sleep for the liveness
// ticks and the stop flag.
template <class Stop>
bool next_msg(ipc::Ring& in, RingOrLink& sleeper, const ipc::WaitPolicy& w, Stop&& stop,
              Status* ended, ipc::BatchMsg* m) {
  for (;;) {
    const uint32_t seen = in.not_empty.seen();
    if (in.try_pop(*m)) return true;
    if (stop()) return false;
    *ended = sleeper.sleep(seen, w);
    if (!ended->ok()) return false;
  }
}

struct Leader {
  ipc::Segment& seg;
  net::UcxLink& link;
  const int r;
  const int e;  // the stage after the worker's slice: the consumer of what comes back
  ipc::StageShared& me = seg.stage(r);
  std::vector<ipc::BatchMsg> sent = std::vector<ipc::BatchMsg>(size_t(seg.dims().inflight));
  std::vector<bool> out = std::vector<bool>(size_t(seg.dims().inflight));
  uint64_t last_id = 0;
  // Refused messages waiting for the batches before them to come back:
  // stage e takes ids in increasing order.
  std::vector<ipc::BatchMsg> held = {};
  std::vector<uint8_t> batch_buf = {};  // the descriptor's parts of the frame being sent
  // The id the worker's grammar table holds at each entry, as sent on this
  // link (a new link starts from an empty table).
  std::vector<uint64_t> grammar_sent =
      std::vector<uint64_t>(size_t(std::max(seg.params().grammar_entries, 0)));
  std::vector<std::string> grammar_specs = {};
  std::vector<net::Grammar> grammar_frames = {};

  void pass() { me.passed.fetch_add(1, std::memory_order_release); }
  bool to_next(const ipc::BatchMsg& m) {
    return seg.ring(e).push(m, [&] { return seg.stopping(); });
  }
  // The smallest id still on the worker (UINT64_MAX: none).
  uint64_t first_out() const {
    uint64_t id = UINT64_MAX;
    for (size_t k = 0; k < out.size(); ++k)
      if (out[k]) id = std::min(id, sent[k].batch_id);
    return id;
  }
  // The held refusals no batch on the worker precedes, in order.
  void flush_held() {
    const uint64_t first = first_out();
    size_t n = 0;
    while (n < held.size() && held[n].batch_id < first) (void)to_next(held[n++]);
    held.erase(held.begin(), held.begin() + ptrdiff_t(n));
  }
  // A message stage r-1 pushed: sent on, dropped (a dead epoch's) or failed
  // to stage e when malformed but its slot is usable, after the batches
  // before it (a malformed message means a broken segment anyway).
  Status on_msg(ipc::BatchMsg m) {
    if (seg.stale(m.batch_id)) return pass(), Status();
    Status why = ipc::check_msg(m, seg.dims(), last_id);
    net::Batch f;
    if (why.ok()) why = make_grammar_frames(seg, m, grammar_sent, &grammar_specs, &grammar_frames);
    if (why.ok()) why = make_batch_frame(seg, r, m, &batch_buf, &f);
    if (!why.ok()) {
      me.stats.refused.fetch_add(1, std::memory_order_relaxed);
      KV_LOG_WARN("relay", "refused a message: {}", why.message());
      pass();
      if (m.slot >= uint32_t(seg.dims().inflight) || m.batch_id <= last_id) return Status();
      last_id = m.batch_id;
      const ipc::ResultView res = seg.result(m.slot);
      res.hdr->batch_id = m.batch_id, res.hdr->status = int32_t(why.code());
      std::snprintf(res.hdr->error, sizeof res.hdr->error, "%s", why.message().c_str());
      m.status = int32_t(why.code()), m.origin = r;
      held.push_back(m);
      flush_held();
      return Status();
    }
    last_id = m.batch_id;
    for (const net::Grammar& g : grammar_frames) {
      KV_RETURN_IF_ERROR(link.send(g));
      grammar_sent[g.entry] = g.id;
    }
    KV_RETURN_IF_ERROR(link.send(f));
    sent[m.slot] = m, out[m.slot] = true;
    me.stats.batches.fetch_add(1, std::memory_order_relaxed);
    me.stats.tokens.fetch_add(uint64_t(m.n_tokens), std::memory_order_relaxed);
    return Status();
  }
  // A batch back from the worker: a Result when its slice ends at the tail
  // (e == S), a Hidden otherwise.
  Status on_frame(const net::Frame& f) {
    const auto* res = std::get_if<net::Result>(&f.payload);
    const auto* hid = std::get_if<net::Hidden>(&f.payload);
    if (e == seg.n_stages() ? !res : !hid) return unexpected(f, "leader");
    const uint32_t slot = res ? res->slot : hid->slot;
    const uint64_t id = res ? res->batch_id : hid->batch_id;
    if (slot >= out.size() || !out[slot])
      return error_status(ErrorCode::kInvalidArgument, "relay: a batch back in slot {} not sent",
                          slot);
    const bool stale = seg.stale(sent[slot].batch_id) && id == sent[slot].batch_id;
    ipc::BatchMsg m;
    if (!stale)  // a dead epoch's is dropped: its slot may be in use again
      KV_RETURN_IF_ERROR(res ? take_result_frame(seg, r, *res, sent[slot], &m)
                             : take_hidden_frame(seg, r, e, *hid, sent[slot], &m));
    out[slot] = false;
    pass();  // before the push: whoever pops it may ask Segment::drained()
    if (!stale) (void)to_next(m);
    flush_held();
    return Status();
  }
};

// Worker: whoever else connected to the listener meanwhile, without
// waiting. A refused peer is logged by the listener; the worker goes on.
// One that holds the key is told why and kept open a while: closing at
// once can end its endpoint before it has read the refusal.
void answer_joiners(net::UcxListener& listener,
                    std::vector<std::unique_ptr<net::UcxLink>>& turned_away) {
  constexpr size_t kKeep = 8;
  for (;;) {
    std::unique_ptr<net::UcxLink> extra;
    Status s = listener.accept(0, &extra);
    if (s.code() == ErrorCode::kTimeout) return;
    if (!s.ok()) continue;  // refused and logged (net::UcxListener::accept)
    KV_LOG_WARN("relay", "refused '{}': this worker already serves a leader", extra->peer_name());
    (void)extra->send(net::Refuse{ErrorCode::kUnavailable, "this worker already serves a leader"});
    if (turned_away.size() == kKeep) turned_away.erase(turned_away.begin());
    turned_away.push_back(std::move(extra));
  }
}

}  // namespace

namespace {

// The worker's slice r..e-1 from o: 1 <= r < e <= S.
Status slice_of(const ipc::Segment& seg, const RelayOptions& o, int* e) {
  *e = o.end > 0 ? o.end : seg.n_stages();
  if (o.first_remote < 1 || o.first_remote >= *e || *e > seg.n_stages())
    return error_status(ErrorCode::kInvalidArgument, "relay: a remote slice {}..{} of {} stages",
                        o.first_remote, *e - 1, seg.n_stages());
  return Status();
}

}  // namespace

Status run_leader_relay(ipc::Segment& seg, net::UcxLink& link, const RelayOptions& o) {
  int e = 0;
  KV_RETURN_IF_ERROR(slice_of(seg, o, &e));
  Leader L{seg, link, o.first_remote, e};
  ipc::Ring& in = seg.ring(L.r);
  const ipc::WaitPolicy wait{seg.params().spin_ns, o.poll_ns};
  bool bye = false;
  Status ended;
  Liveness live{o};
  auto on_frame = [&](const net::Frame& f) { return L.on_frame(f); };
  auto stop = [&] {
    if (seg.stopping() || bye || !ended.ok()) return true;
    ended = drain_link(link, &bye, live, on_frame);
    return bye || !ended.ok();
  };
  RingOrLink sleeper(link, in.not_empty, o.one_wait);
  ipc::BatchMsg m;
  while (!stop() && next_msg(in, sleeper, wait, stop, &ended, &m)) ended = L.on_msg(m);
  if (ended.ok()) {
    (void)link.close();
    return Status();
  }
  if (ended.code() == ErrorCode::kIo || ended.code() == ErrorCode::kTimeout) return ended;
  return refuse(link, ended);
}

Status run_worker_relay(ipc::Segment& seg, net::UcxLink& link, const RelayOptions& o) {
  const int r = o.first_remote;
  int e = 0;
  KV_RETURN_IF_ERROR(slice_of(seg, o, &e));
  ipc::Ring& tail_out = seg.ring(e);  // what the slice's last stage pushes
  ipc::Ring& first_in = seg.ring(r);
  const ipc::WaitPolicy wait{seg.params().spin_ns, o.poll_ns};
  uint64_t last_id = 0;
  bool bye = false;
  Status ended;
  std::vector<std::unique_ptr<net::UcxLink>> turned_away;
  std::vector<uint8_t> result_buf;
  net::Hidden hidden;
  Liveness live{o};
  auto on_frame = [&](const net::Frame& f) -> Status {
    if (const auto* g = std::get_if<net::Grammar>(&f.payload)) return take_grammar_frame(seg, *g);
    const auto* b = std::get_if<net::Batch>(&f.payload);
    if (!b) return unexpected(f, "worker");
    ipc::BatchMsg m;
    KV_RETURN_IF_ERROR(take_batch_frame(seg, r, *b, last_id, &m));
    last_id = m.batch_id;
    (void)first_in.push(
        m, [&] { return seg.stopping(); }, wait);
    return Status();
  };
  auto stop = [&] {
    if (seg.stopping() || bye || !ended.ok()) return true;
    ended = drain_link(link, &bye, live, on_frame);
    if (o.listener) answer_joiners(*o.listener, turned_away);
    return bye || !ended.ok();
  };
  RingOrLink sleeper(link, tail_out.not_empty, o.one_wait);
  ipc::BatchMsg m;
  while (!stop() && next_msg(tail_out, sleeper, wait, stop, &ended, &m)) {
    // Pushed once the segment stops: a batch a stage failed because the
    // session ends (a group's leader whose member died), not a result. The
    // leader recomputes it after the rejoin; sent, it would fail requests.
    if (seg.stopping()) break;
    if (e < seg.n_stages()) {
      ended = make_hidden_frame(seg, r, e, m, &hidden);
      if (ended.ok()) ended = link.send(hidden);
      continue;
    }
    net::Result f;
    ended = make_result_frame(seg, m, &result_buf, &f);
    if (ended.ok()) ended = link.send(f);
  }
  if (ended.ok() && !bye && o.local_fault) {
    Status fault = o.local_fault();
    if (!fault.ok()) return refuse_and_wait(link, fault);
  }
  if (ended.ok()) {
    (void)link.close();
    return Status();
  }
  if (ended.code() == ErrorCode::kIo || ended.code() == ErrorCode::kTimeout) return ended;
  return refuse(link, ended);
}

}  // namespace kvasir::relay
