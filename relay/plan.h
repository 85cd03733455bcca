// relay/plan.h — what a Plan frame carries between a leader and a worker
// (docs/multi-host.md, "The relay"): the join's three messages, as bytes.
//
//   leader → worker  kPlan     the segment's plan (every SegmentParams field),
//                              the first stage the worker runs, the stage
//                              after its last and the watchdog's limits for its stages (the
//                              leader's [recovery] keys)
//   worker → leader  kSized    the smallest KV capacity of its stages
//   leader → worker  kBlocks   the block counts the leader decided for all
//
// Each is a kind byte, a format version and fields written one by one,
// little-endian (never a struct copied as bytes). Decoding treats the bytes
// as hostile: every length is checked, text fields must end inside their
// arrays, and a plan must pass Segment::check_params, so a worker never
// creates a segment from a plan its own stages would refuse; its stages
// first_remote - 1 and first_remote must be on two hosts, so both hosts
// see the cut as a link across hosts (ipc/link_kind.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "ipc/hang_watch.h"
#include "ipc/segment.h"

namespace kvasir::relay {

// 2: the plan carries the watchdog's limits; 3: each stage's host
// (ipc::StagePlan::host), which must put the cut between two hosts; 4: the
// end of the worker's slice.
inline constexpr uint16_t kPlanFormat = 4;

enum class PlanKind : uint8_t { kPlan = 1, kSized = 2, kBlocks = 3 };

struct WorkerPlan {
  ipc::SegmentParams params;
  int32_t first_remote = 1;  // the worker runs stages first_remote..end-1
  int32_t end = 0;           // first_remote < end <= n_stages
  ipc::HangLimits watchdog;  // what the worker's watchdog kills (ipc/hang_watch.h)
};

struct WorkerSized {
  int64_t capacity_blocks = 0;  // the smallest of its stages'
};

struct RingBlocks {
  int32_t kv_blocks = 0;
  int32_t kv_blocks_swa = 0;  // 0: no sliding-window pool
};

std::vector<uint8_t> encode_plan(const WorkerPlan& p);
std::vector<uint8_t> encode_sized(const WorkerSized& s);
std::vector<uint8_t> encode_blocks(const RingBlocks& b);

// kInvalidArgument and why for bytes that are not that message.
Status decode_plan(std::span<const uint8_t> bytes, WorkerPlan* out);
Status decode_sized(std::span<const uint8_t> bytes, WorkerSized* out);
Status decode_blocks(std::span<const uint8_t> bytes, RingBlocks* out);

}  // namespace kvasir::relay
