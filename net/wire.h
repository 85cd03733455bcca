// net/wire.h — the frames two hosts exchange over one link (docs/multi-host.md).
//
// A frame is a fixed 24-byte header and a typed payload, little-endian,
// written and read field by field (never a memcpy of a struct, so neither
// padding nor the host's byte order reaches the wire):
//
//   magic "KVNW" | wire version u16 | type u16 | flags u32 | payload bytes u32 | sequence u64
//
// Every decode treats its bytes as hostile, like the segment's messages
// (ipc/batch.h): a truncated frame, one over the configured maximum, an
// unknown type, a wrong magic, a length that disagrees with the fields or a
// boundary whose n_tokens x hidden x 4 overflows is a Status, never a read
// out of bounds. A frame of another wire version is refused naming both
// versions: the two hosts run different builds, and the operator must know
// which. Decoded views (spans) point into the caller's buffer: they live as
// long as it does.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "base/status.h"

namespace kvasir::net {

inline constexpr uint16_t kWireVersion = 3;  // 2: the Grammar frame; 3: the Hidden frame
inline constexpr size_t kHeaderBytes = 24;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;  // HMAC-SHA256
inline constexpr size_t kMaxNameBytes = 64;
inline constexpr size_t kMaxRefuseText = 1024;
inline constexpr size_t kMaxHiddenTimes = 16;  // a Hidden frame's stage times (ipc::kMaxStageTimes)

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;
using ByteView = std::span<const uint8_t>;

enum class FrameType : uint16_t {
  kHello = 1,      // connector → listener: who it is, its nonce
  kChallenge = 2,  // listener → connector: the listener's nonce
  kProof = 3,      // each side's HMAC over both nonces (net/auth.h)
  kRefuse = 4,     // why the sender ends the link
  kPlan = 5,       // opaque bytes (the leader's plan for a worker)
  kReady = 6,
  kBatch = 7,   // one ring message with its descriptor and boundary
  kResult = 8,  // a batch's result slot, the other way
  kPing = 9,
  kPong = 10,
  kBye = 11,      // an orderly end
  kGrammar = 12,  // a grammar-table entry, ahead of the first batch naming it
  kHidden = 13,   // a batch's hidden state back from a slice that ends before the tail
};
inline constexpr uint16_t kMaxFrameType = 13;
const char* frame_type_name(FrameType t);

enum class Role : uint8_t { kLeader = 1, kWorker = 2 };

struct WireLimits {
  // Header included. A Batch of 4096 tokens x 8192 hidden f32 is 128 MiB;
  // the link sets it from the plan's widths, this is the ceiling by default.
  uint32_t max_frame_bytes = 256u << 20;
};

struct FrameHeader {
  uint16_t version = kWireVersion;
  FrameType type = FrameType::kBye;
  uint32_t flags = 0;  // none defined yet: must be 0
  uint32_t payload_bytes = 0;
  uint64_t seq = 0;  // the sender's count of frames on this link, from 0
};

struct Hello {
  uint16_t wire_version = kWireVersion;
  Role role = Role::kWorker;
  std::string name;  // at most kMaxNameBytes, for the logs
  Nonce nonce{};
};
struct Challenge {
  uint16_t wire_version = kWireVersion;
  Role role = Role::kLeader;
  Nonce nonce{};
};
struct Proof {
  Mac mac{};
};
struct Refuse {
  ErrorCode code = ErrorCode::kInternal;
  std::string text;  // at most kMaxRefuseText
};
struct Plan {
  ByteView bytes;
};
struct Ready {};
// The ring message's fields travel as they are (ipc/batch.h BatchMsg), so
// the relay on the far side pushes the same message on its ring.
struct Batch {
  uint16_t msg_kind = 0;
  uint16_t msg_version = 0;
  int32_t status = 0;
  uint64_t batch_id = 0;
  uint32_t slot = 0;
  int32_t n_rows = 0;
  int32_t n_tokens = 0;
  ByteView descriptor;
  uint32_t boundary_tokens = 0;  // the boundary is [boundary_tokens, hidden] f32
  uint32_t hidden = 0;
  ByteView boundary;
};
struct Result {
  uint64_t batch_id = 0;
  uint32_t slot = 0;
  ByteView bytes;
};
struct Ping {
  int64_t sent_ns = 0;  // the pinger's CLOCK_MONOTONIC, echoed by the Pong
};
struct Pong {
  int64_t sent_ns = 0;
};
struct Bye {};
// Entry `entry` of the leader's grammar table (ipc/grammar_table.h) holds
// `spec` under `id`: the worker writes it into its own table before it
// takes the next Batch, which may name it. The entry index and the spec's
// size are checked against the worker's plan there, not here.
struct Grammar {
  uint32_t entry = 0;
  uint64_t id = 0;
  ByteView spec;
};

// A worker whose slice r..e-1 ends before the tail hands batch_id back
// to the leader, whose stage e takes it: the ring message as its last
// stage pushed it (a stage that failed it set status, origin and error),
// the busy times of stages first_stage..first_stage+n_times-1, and
// Boundary[slot][e-1], [boundary_tokens, hidden] f32. The leader checks
// every field against the batch it sent (relay/relay.h), not here.
struct Hidden {
  uint16_t msg_kind = 0;
  uint16_t msg_version = 0;
  int32_t status = 0;
  int32_t origin = -1;
  uint64_t batch_id = 0;
  uint32_t slot = 0;
  int32_t n_rows = 0;
  int32_t n_tokens = 0;
  uint32_t first_stage = 0;
  uint32_t n_times = 0;  // at most kMaxHiddenTimes
  std::array<uint64_t, kMaxHiddenTimes> busy_ns{};
  std::string error;  // the failing stage's text; at most kMaxRefuseText
  uint32_t boundary_tokens = 0;
  uint32_t hidden = 0;
  ByteView boundary;
};

// In FrameType order (type_of: the index + 1).
using Payload = std::variant<Hello, Challenge, Proof, Refuse, Plan, Ready, Batch, Result, Ping,
                             Pong, Bye, Grammar, Hidden>;

struct Frame {
  FrameHeader header;
  Payload payload;
};

FrameType type_of(const Payload& p);

// Appends one whole frame (header and payload) to out. Throws kvasir::Error
// if p breaks a bound the decoder checks (a name too long, a boundary whose
// size disagrees with its shape): a sender never emits what a peer refuses.
void encode_frame(const Payload& p, uint64_t seq, std::vector<uint8_t>& out,
                  uint16_t version = kWireVersion);

// The same frame in two parts, so a sender need not copy a boundary: out
// gets everything up to a Batch's or a Hidden's boundary bytes, and the view returned is
// the rest of the frame (the boundary itself; empty for other types). The
// bytes out + tail are exactly encode_frame's.
ByteView encode_frame_split(const Payload& p, uint64_t seq, std::vector<uint8_t>& out,
                            uint16_t version = kWireVersion);

// The header alone (the first kHeaderBytes of bytes): magic, version, a
// known type, flags 0, and a payload that keeps the frame within limits.
Status decode_header(ByteView bytes, const WireLimits& limits, FrameHeader* out);

// A whole frame: its header (as above), exactly payload_bytes after it, and
// a payload whose fields agree with its length. Views in *out point into
// bytes.
Status decode_frame(ByteView bytes, const WireLimits& limits, Frame* out);

// Just the payload of a header already decoded (the link reads the two apart).
Status decode_payload(const FrameHeader& h, ByteView payload, Payload* out);

}  // namespace kvasir::net
