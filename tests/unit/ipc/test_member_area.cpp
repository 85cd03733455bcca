// Expert groups in the segment (ipc/segment.h, docs/expert-groups.md): the
// members' slots follow the stages', each member's area is sized from the
// plan and lies apart from the others and from the rest of the layout, an
// opener sees what the creator wrote, and a bad member plan is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "base/check.h"
#include "ipc/segment.h"

namespace kvasir::ipc {
namespace {

SegmentParams group_params(int members, int top_k = 4) {
  SegmentParams p;
  p.n_stages = 2;
  p.dims.max_rows = 4;
  p.dims.max_tokens = 24;
  p.dims.max_table = 8;
  p.dims.hidden = 32;
  p.dims.inflight = 2;
  p.stages[0] = StagePlan{0, 1, 1, "cpu", -1, -1};
  p.stages[1] = StagePlan{2, 3, 1, "cpu", 0, 1};
  p.n_members = members;
  p.moe_top_k = top_k;
  for (int m = 0; m < members; ++m)
    p.members[m] = MemberPlan{1, m + 1, StagePlan{2, 3, 1, "cpu", 2 + m * 2, 3 + m * 2}};
  return p;
}

std::string name() {
  return "kvasir-test-members-" + std::to_string(getpid());
}

TEST(MemberArea, LaidOutApartAndSizedFromThePlan) {
  const SegmentParams p = group_params(3);
  const auto l = Segment::layout(p);
  EXPECT_GE(l.members, l.grammar);
  EXPECT_GE(l.member_ids - l.member_x, 4u * 24 * 32);         // x [max_tokens, hidden]
  EXPECT_GE(l.member_y - l.member_ids, 4u * 24 * 4);          // ids [max_tokens, top_k]
  EXPECT_GE(l.member_stride - l.member_y, 4u * 24 * 4 * 32);  // y [max_tokens * top_k, hidden]
  EXPECT_EQ(l.total, l.members + 3 * l.member_stride);
  const auto none = Segment::layout(group_params(0));
  EXPECT_EQ(none.total, none.members);  // no group: no area

  Segment::remove(name());
  auto seg = Segment::create(name(), p);
  ASSERT_EQ(seg->n_members(), 3);
  for (int m = 0; m < 3; ++m) {
    MemberArea a = seg->member_area(m);
    EXPECT_EQ(a.call->req_seq.load(), 0u);
    EXPECT_EQ(a.call->ans_seq.load(), 0u);
    // Fill the whole area: nothing of another member or the stages moves.
    std::memset(a.x, 0x11 * (m + 1), 4 * 24 * 32);
    std::memset(a.ids, 0x11 * (m + 1), 4 * 24 * 4);
    std::memset(a.y, 0x11 * (m + 1), 4 * 24 * 4 * 32);
    seg->member(m).pid.store(100 + m);
  }
  EXPECT_NE(&seg->member(0), &seg->stage(1));
  EXPECT_EQ(seg->stage(1).pid.load(), 0);
  auto other = Segment::open(name());
  EXPECT_EQ(other->params().members[2].plan.experts_first, 6);
  for (int m = 0; m < 3; ++m) {
    EXPECT_EQ(other->member(m).pid.load(), 100 + m);
    MemberArea a = other->member_area(m);
    const auto want = uint8_t(0x11 * (m + 1));
    EXPECT_EQ(reinterpret_cast<const uint8_t*>(a.x)[0], want);
    EXPECT_EQ(reinterpret_cast<const uint8_t*>(a.y)[4 * 24 * 4 * 32 - 1], want);
    EXPECT_EQ(reinterpret_cast<const uint8_t*>(a.ids)[4 * 24 * 4 - 1], want);
  }
  EXPECT_THROW(seg->member(3), Error);
  EXPECT_THROW(seg->member_area(-1), Error);
  Segment::remove(name());
}

TEST(MemberArea, BadMemberPlansRefused) {
  EXPECT_TRUE(Segment::check_params(group_params(2)).empty());
  auto p = group_params(2);
  p.n_members = kMaxStages - 1;  // with 2 stages: 17 processes
  EXPECT_FALSE(Segment::check_params(p).empty());
  p = group_params(2, 0);  // no top_k to size the areas
  EXPECT_FALSE(Segment::check_params(p).empty());
  p = group_params(2);
  p.members[1].position = 2;  // no such stage
  EXPECT_FALSE(Segment::check_params(p).empty());
  p = group_params(2);
  p.members[0].position = 0;  // stage 0 leads no group
  EXPECT_FALSE(Segment::check_params(p).empty());
  p = group_params(2);
  p.members[0].plan.first = 1;  // not its leader's layers
  EXPECT_FALSE(Segment::check_params(p).empty());
  p = group_params(2);
  p.members[1].plan.experts_first = -1;  // a member holds a range
  EXPECT_FALSE(Segment::check_params(p).empty());
  p = group_params(2);
  p.stages[0].experts_first = 3;  // a range without its end
  EXPECT_FALSE(Segment::check_params(p).empty());
}

}  // namespace
}  // namespace kvasir::ipc
