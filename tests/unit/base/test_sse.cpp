// The SSE reader (base/sse.h) against the spec's event stream rules: every
// line ending, multi-line data, comments, event names and ids, and each
// stream split at every byte (and fed byte by byte) giving the same events.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/sse.h"

using namespace kvasir;

namespace {

std::vector<SseEvent> whole(std::string_view wire) {
  SseParser p;
  return p.feed(wire);
}

std::vector<std::string> datas(const std::vector<SseEvent>& ev) {
  std::vector<std::string> out;
  for (const auto& e : ev) out.push_back(e.data);
  return out;
}

// The events of `wire` fed in two pieces split at every offset, and byte by
// byte, must equal those of `wire` fed whole.
void expect_split_anywhere(std::string_view wire) {
  const auto want = whole(wire);
  for (size_t cut = 0; cut <= wire.size(); ++cut) {
    SseParser p;
    auto got = p.feed(wire.substr(0, cut));
    auto rest = p.feed(wire.substr(cut));
    got.insert(got.end(), rest.begin(), rest.end());
    ASSERT_EQ(datas(got), datas(want)) << "split at " << cut;
  }
  SseParser p;
  std::vector<SseEvent> got;
  for (char c : wire) {
    auto ev = p.feed(std::string_view(&c, 1));
    got.insert(got.end(), ev.begin(), ev.end());
  }
  EXPECT_EQ(datas(got), datas(want));
}

TEST(Sse, EventsEndAtABlankLineOfAnyLineEnding) {
  const std::vector<std::string> want = {"{\"a\":1}", "[DONE]"};
  for (std::string_view wire :
       {"data: {\"a\":1}\n\ndata: [DONE]\n\n", "data: {\"a\":1}\r\n\r\ndata: [DONE]\r\n\r\n",
        "data: {\"a\":1}\r\rdata: [DONE]\r\r", "data: {\"a\":1}\r\n\ndata: [DONE]\n\r\n"}) {
    EXPECT_EQ(datas(whole(wire)), want) << wire;
    expect_split_anywhere(wire);
  }
}

TEST(Sse, AnIncompleteEventWaitsForItsBlankLine) {
  SseParser p;
  EXPECT_TRUE(p.feed("data: a\n").empty());
  EXPECT_TRUE(p.feed("data: b").empty());
  EXPECT_EQ(datas(p.feed("\n\n")), std::vector<std::string>{"a\nb"});
}

TEST(Sse, CrLfSplitAcrossFeedsIsOneLineEnd) {
  SseParser p;
  EXPECT_TRUE(p.feed("data: a\r").empty());
  // Were the "\n" a second line end, this would end the event without "b".
  EXPECT_TRUE(p.feed("\ndata: b\r").empty());
  EXPECT_EQ(datas(p.feed("\n\r\n")), std::vector<std::string>{"a\nb"});
}

TEST(Sse, MultiLineDataJoinsWithNewline) {
  for (std::string_view wire :
       {"data: one\ndata: two\ndata:three\n\n", "data: one\r\ndata: two\r\ndata:three\r\n\r\n",
        "data: one\rdata: two\rdata:three\r\r"}) {
    EXPECT_EQ(datas(whole(wire)), std::vector<std::string>{"one\ntwo\nthree"}) << wire;
    expect_split_anywhere(wire);
  }
  // Only one space after the colon is dropped; an empty data line counts.
  EXPECT_EQ(datas(whole("data:  x\ndata:\ndata\n\n")), std::vector<std::string>{" x\n\n"});
}

TEST(Sse, CommentsAreIgnored) {
  const std::string wire = ": keep-alive\n\n:x\ndata: a\n: between\ndata: b\n\n";
  EXPECT_EQ(datas(whole(wire)), std::vector<std::string>{"a\nb"});
  expect_split_anywhere(wire);
}

TEST(Sse, EventAndIdFields) {
  const auto ev = whole("event: error\nid: 7\ndata: {}\n\ndata: x\n\nid\nevent: ping\n\n");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].type, "error");
  EXPECT_EQ(ev[0].id, "7");
  EXPECT_EQ(ev[0].data, "{}");
  EXPECT_EQ(ev[1].type, "message");  // the name lasts one event
  EXPECT_EQ(ev[1].id, "7");          // the id lasts until the next "id:"
  EXPECT_EQ(ev[1].data, "x");
}

TEST(Sse, UnknownFieldsAndABomAreIgnored) {
  const std::string wire =
      "\xEF\xBB\xBF"
      "data: a\nretry: 10\nfoo: bar\n\n";
  EXPECT_EQ(datas(whole(wire)), std::vector<std::string>{"a"});
  expect_split_anywhere(wire);
  // A BOM past the start is data, not dropped.
  EXPECT_EQ(datas(whole("data: a\n\n\xEF\xBB\xBF"
                        "data: b\n\n")),
            std::vector<std::string>{"a"});
}

}  // namespace
