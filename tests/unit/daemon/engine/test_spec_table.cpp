// The bridge's placement of structured-output specs in the segment's
// grammar table (daemon/engine/spec_table.h): shared entries, no entry
// rewritten while a batch in the ring names it, the oldest freed entry
// taken first.
#include <gtest/gtest.h>

#include <vector>

#include "base/check.h"
#include "daemon/engine/spec_table.h"

namespace kvasir {
namespace {

struct Table {
  explicit Table(int32_t n, uint32_t cap = 64)
      : mem(ipc::GrammarTable::bytes_for(n, cap), 0), view(mem.data(), n, cap) {}
  std::string read(uint32_t entry, uint64_t id) const {
    std::string out;
    const Status st = view.read(int32_t(entry) - 1, id, &out);
    return st.ok() ? out : "<" + st.message() + ">";
  }
  std::vector<char> mem;
  ipc::GrammarTable view;
};

TEST(SpecTable, SameSpecSharesOneEntry) {
  Table t(4);
  SpecTable specs(t.view);
  const auto a = specs.place("schema A", 1, 1);
  const auto b = specs.place("schema A", 1, 1);
  const auto c = specs.place("schema A", 2, 1);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  EXPECT_EQ(specs.writes(), 1u);
  EXPECT_EQ(t.read(a.first, a.second), "schema A");
  const auto d = specs.place("schema B", 2, 1);
  EXPECT_NE(d.first, a.first);
  EXPECT_EQ(t.read(d.first, d.second), "schema B");
}

TEST(SpecTable, NoEntryNamedInTheRingIsRewritten) {
  Table t(2);
  SpecTable specs(t.view);
  const auto a = specs.place("A", 1, 1);  // batch 1 in the ring
  const auto b = specs.place("B", 2, 1);  // batch 2 too
  // Batch 3 while 1 and 2 are out: nothing free.
  EXPECT_THROW(specs.place("C", 3, 1), Error);
  // Batch 1 came back (oldest now 2): A's entry is free, B's is not.
  const auto c = specs.place("C", 3, 2);
  EXPECT_EQ(c.first, a.first);
  EXPECT_NE(c.second, a.second);  // a new id: a reader of A's id is refused
  EXPECT_EQ(t.read(a.first, a.second).rfind("<", 0), 0u);
  EXPECT_EQ(t.read(b.first, b.second), "B");
  EXPECT_EQ(t.read(c.first, c.second), "C");
  // A again: written afresh (its old entry is C's now).
  EXPECT_THROW(specs.place("A", 4, 2), Error);  // B (2) and C (3) still out
  const auto a2 = specs.place("A", 4, 3);
  EXPECT_EQ(a2.first, b.first);
  // An entry named again by a newer batch stays taken until that one is back.
  specs.place("C", 5, 4);
  EXPECT_EQ(specs.place("D", 6, 5).first, a2.first);  // C named by 5; A by 4 < 5: free
  EXPECT_THROW(specs.place("E", 6, 5), Error);        // C (5) and D (6) both out
}

TEST(SpecTable, EmptyEntriesFirstThenTheOldest) {
  Table t(3);
  SpecTable specs(t.view);
  const auto a = specs.place("A", 1, 1);
  const auto b = specs.place("B", 2, 2);
  const auto c = specs.place("C", 3, 3);
  EXPECT_EQ(std::vector<uint32_t>({a.first, b.first, c.first}), std::vector<uint32_t>({1, 2, 3}));
  specs.place("B", 4, 4);                 // B named again
  const auto d = specs.place("D", 5, 5);  // A (1) is the oldest free
  EXPECT_EQ(d.first, a.first);
  const auto e = specs.place("E", 6, 6);  // then C (3), not B (4)
  EXPECT_EQ(e.first, c.first);
}

TEST(SpecTable, OverCapacityAndNoTable) {
  Table t(1, 8);
  SpecTable specs(t.view);
  EXPECT_TRUE(specs.enabled());
  EXPECT_EQ(specs.capacity(), 8u);
  EXPECT_THROW(specs.place(std::string(9, 'x'), 1, 1), Error);
  SpecTable none(ipc::GrammarTable{});
  EXPECT_FALSE(none.enabled());
}

}  // namespace
}  // namespace kvasir
