// tests/fuzz/fuzz_wire.cpp — the host link's frame decoder on arbitrary bytes.
//
// A refusal (a non-ok Status) is clean; a crash, a sanitizer report or an
// exception is a bug. A frame that decodes must say what it carries: its
// views inside the input, a Batch's or a Hidden's boundary exactly
// n_tokens x hidden x 4 bytes, and encoding it again gives the same bytes (a Refuse's unknown
// code aside, which decodes as kInternal). Every decoded frame is then fed
// to a listener's handshake, which must refuse anything out of order.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "net/auth.h"
#include "net/wire.h"

using namespace kvasir;
using namespace kvasir::net;

namespace {

bool inside(ByteView v, const uint8_t* data, size_t size) {
  return v.empty() || (v.data() >= data && v.data() + v.size() <= data + size);
}

void check_views(const Payload& p, const uint8_t* data, size_t size) {
  if (const auto* b = std::get_if<Batch>(&p)) {
    if (!inside(b->descriptor, data, size) || !inside(b->boundary, data, size)) __builtin_trap();
    if (uint64_t(b->boundary_tokens) * b->hidden * 4 != b->boundary.size()) __builtin_trap();
  } else if (const auto* r = std::get_if<Result>(&p)) {
    if (!inside(r->bytes, data, size)) __builtin_trap();
  } else if (const auto* pl = std::get_if<Plan>(&p)) {
    if (!inside(pl->bytes, data, size)) __builtin_trap();
  } else if (const auto* g = std::get_if<Grammar>(&p)) {
    if (!inside(g->spec, data, size) || g->id == 0) __builtin_trap();
  } else if (const auto* h = std::get_if<Hidden>(&p)) {
    if (!inside(h->boundary, data, size) || h->n_times > kMaxHiddenTimes) __builtin_trap();
    if (uint64_t(h->boundary_tokens) * h->hidden * 4 != h->boundary.size()) __builtin_trap();
  }
}

void drive_handshake(const Payload& p) {
  static const ClusterKey key(std::vector<uint8_t>(32, 0x5a));
  Handshake lis(key, {Side::kListener, Role::kLeader, "leader"}, Nonce{1});
  (void)lis.start();
  std::optional<Payload> reply;
  const bool ok = lis.on_frame(p, &reply).ok();
  // Only a Hello of this wire version may move a listener on.
  const auto* h = std::get_if<Hello>(&p);
  if (ok != (h != nullptr && h->wire_version == kWireVersion && h->nonce != Nonce{1}))
    __builtin_trap();
  if (lis.done()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  WireLimits limits;
  limits.max_frame_bytes = 1 << 20;
  Frame f;
  if (!decode_frame(ByteView(data, size), limits, &f).ok()) return 0;
  if (f.header.type != type_of(f.payload)) __builtin_trap();
  if (kHeaderBytes + f.header.payload_bytes != size) __builtin_trap();
  check_views(f.payload, data, size);
  if (!std::holds_alternative<Refuse>(f.payload)) {
    std::vector<uint8_t> again;
    encode_frame(f.payload, f.header.seq, again);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  }
  drive_handshake(f.payload);
  return 0;
}
