// tests/unit/net/test_wire.cpp — frames round-trip, and every hostile frame is refused.
#include <gtest/gtest.h>

#include <cstring>

#include "base/check.h"
#include "net/wire.h"

using namespace kvasir;
using namespace kvasir::net;

namespace {

std::vector<uint8_t> enc(const Payload& p, uint64_t seq = 7) {
  std::vector<uint8_t> out;
  encode_frame(p, seq, out);
  return out;
}

Frame dec_ok(const std::vector<uint8_t>& b, WireLimits lim = {}) {
  Frame f;
  Status s = decode_frame(b, lim, &f);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return f;
}

Status dec(const std::vector<uint8_t>& b, WireLimits lim = {}) {
  Frame f;
  return decode_frame(b, lim, &f);
}

void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = uint8_t(v >> (8 * i));
}

std::vector<float> boundary_of(uint32_t n, uint32_t hidden) {
  std::vector<float> v(size_t(n) * hidden);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.5f - 3.0f;
  return v;
}

ByteView bytes_of(const std::vector<float>& v) {
  return ByteView(reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4);
}

}  // namespace

TEST(Wire, HeaderIsLittleEndianFieldByField) {
  const auto b = enc(Ping{0x0102030405060708}, 0x1122334455667788ull);
  ASSERT_EQ(b.size(), kHeaderBytes + 8);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "KVNW");
  EXPECT_EQ(b[4], kWireVersion);
  EXPECT_EQ(b[5], 0);
  EXPECT_EQ(b[6], uint8_t(FrameType::kPing));
  EXPECT_EQ(b[7], 0);
  EXPECT_EQ(b[12], 8);
  EXPECT_EQ(b[13], 0);  // payload bytes
  EXPECT_EQ(b[16], 0x88);
  EXPECT_EQ(b[23], 0x11);  // sequence
  EXPECT_EQ(b[24], 0x08);
  EXPECT_EQ(b[31], 0x01);  // timestamp
}

TEST(Wire, HandshakeFramesRoundTrip) {
  Hello h;
  h.role = Role::kWorker, h.name = "worker-1";
  for (size_t i = 0; i < kNonceBytes; ++i) h.nonce[i] = uint8_t(i * 7);
  Frame f = dec_ok(enc(h, 0));
  ASSERT_EQ(f.header.type, FrameType::kHello);
  const auto& h2 = std::get<Hello>(f.payload);
  EXPECT_EQ(h2.name, "worker-1");
  EXPECT_EQ(h2.role, Role::kWorker);
  EXPECT_EQ(h2.nonce, h.nonce);
  EXPECT_EQ(h2.wire_version, kWireVersion);

  Challenge c;
  c.nonce.fill(0xab);
  EXPECT_EQ(std::get<Challenge>(dec_ok(enc(c)).payload).nonce, c.nonce);
  Proof p;
  p.mac.fill(0x5a);
  EXPECT_EQ(std::get<Proof>(dec_ok(enc(p)).payload).mac, p.mac);
  Frame r = dec_ok(enc(Refuse{ErrorCode::kUnauthenticated, "no"}));
  EXPECT_EQ(std::get<Refuse>(r.payload).code, ErrorCode::kUnauthenticated);
  EXPECT_EQ(std::get<Refuse>(r.payload).text, "no");
  EXPECT_EQ(dec_ok(enc(Ready{})).header.type, FrameType::kReady);
  EXPECT_EQ(dec_ok(enc(Bye{})).header.type, FrameType::kBye);
  EXPECT_EQ(std::get<Pong>(dec_ok(enc(Pong{-5})).payload).sent_ns, -5);
}

TEST(Wire, BatchResultPlanRoundTrip) {
  const auto bnd = boundary_of(256, 576);  // [256, 576] f32: 576 KiB
  const std::vector<uint8_t> desc = {1, 2, 3, 4, 5};
  Batch b;
  b.msg_kind = 1, b.msg_version = 3, b.status = 0, b.batch_id = 42, b.slot = 2, b.n_rows = 4;
  b.n_tokens = 256, b.descriptor = desc, b.boundary_tokens = 256, b.hidden = 576;
  b.boundary = bytes_of(bnd);
  const auto bytes = enc(b, 9);
  Frame f = dec_ok(bytes);
  EXPECT_EQ(f.header.seq, 9u);
  const auto& b2 = std::get<Batch>(f.payload);
  EXPECT_EQ(b2.batch_id, 42u);
  EXPECT_EQ(b2.slot, 2u);
  EXPECT_EQ(b2.n_rows, 4);
  EXPECT_EQ(b2.msg_kind, 1);
  EXPECT_EQ(b2.msg_version, 3);
  EXPECT_EQ(b2.n_tokens, 256);
  ASSERT_EQ(b2.descriptor.size(), desc.size());
  EXPECT_TRUE(std::equal(desc.begin(), desc.end(), b2.descriptor.begin()));
  ASSERT_EQ(b2.boundary.size(), bnd.size() * 4);
  EXPECT_EQ(std::memcmp(b2.boundary.data(), bnd.data(), bnd.size() * 4), 0);

  const std::vector<uint8_t> res(300, 9);
  Frame fr = dec_ok(enc(Result{42, 2, res}));
  EXPECT_EQ(std::get<Result>(fr.payload).bytes.size(), 300u);
  const std::vector<uint8_t> plan(1000, 1);
  EXPECT_EQ(std::get<Plan>(dec_ok(enc(Plan{plan})).payload).bytes.size(), 1000u);
}

TEST(Wire, GrammarFrameRoundTripsAndRefusesTheEmptyId) {
  const std::string spec = "{\"type\":\"object\"}";
  const ByteView sv(reinterpret_cast<const uint8_t*>(spec.data()), spec.size());
  Frame f = dec_ok(enc(Grammar{7, 0x1122334455667788ull, sv}, 3));
  ASSERT_EQ(f.header.type, FrameType::kGrammar);
  const auto& g = std::get<Grammar>(f.payload);
  EXPECT_EQ(g.entry, 7u);
  EXPECT_EQ(g.id, 0x1122334455667788ull);
  EXPECT_EQ(std::string(g.spec.begin(), g.spec.end()), spec);
  EXPECT_STREQ(frame_type_name(FrameType::kGrammar), "grammar");
  // Id 0 names an empty entry: never sent, refused when it arrives.
  Status s = dec(enc(Grammar{7, 0, sv}));
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("id 0"), std::string::npos) << s.message();
  // A spec length past the frame.
  auto b = enc(Grammar{1, 2, sv});
  put_u32(b, kHeaderBytes + 12, uint32_t(spec.size() + 1));
  EXPECT_NE(dec(b).message().find("grammar: truncated"), std::string::npos) << dec(b).message();
}

TEST(Wire, HiddenFrameRoundTripsAndRefusesWhatDoesNotFit) {
  const auto bnd = boundary_of(6, 32);
  Hidden h;
  h.msg_kind = 1, h.msg_version = 3, h.status = 5, h.origin = 2, h.batch_id = 42, h.slot = 3;
  h.n_rows = 2, h.n_tokens = 6, h.first_stage = 1, h.n_times = 2;
  h.busy_ns[0] = 0x0102030405060708ull, h.busy_ns[1] = 77;
  h.error = "stage 2: out of memory", h.boundary_tokens = 6, h.hidden = 32;
  h.boundary = bytes_of(bnd);
  Frame f = dec_ok(enc(h, 4));
  ASSERT_EQ(f.header.type, FrameType::kHidden);
  EXPECT_STREQ(frame_type_name(FrameType::kHidden), "hidden");
  const auto& g = std::get<Hidden>(f.payload);
  EXPECT_EQ(g.msg_kind, 1);
  EXPECT_EQ(g.msg_version, 3);
  EXPECT_EQ(g.status, 5);
  EXPECT_EQ(g.origin, 2);
  EXPECT_EQ(g.batch_id, 42u);
  EXPECT_EQ(g.slot, 3u);
  EXPECT_EQ(g.n_rows, 2);
  EXPECT_EQ(g.n_tokens, 6);
  EXPECT_EQ(g.first_stage, 1u);
  ASSERT_EQ(g.n_times, 2u);
  EXPECT_EQ(g.busy_ns[0], 0x0102030405060708ull);
  EXPECT_EQ(g.busy_ns[1], 77u);
  EXPECT_EQ(g.error, h.error);
  ASSERT_EQ(g.boundary.size(), bnd.size() * 4);
  EXPECT_EQ(std::memcmp(g.boundary.data(), bnd.data(), bnd.size() * 4), 0);

  // More stage times than a frame holds: the count is checked before it
  // sizes a read.
  auto b = enc(h);
  const size_t times_at = kHeaderBytes + 2 + 2 + 4 + 4 + 8 + 4 + 4 + 4 + 4;
  put_u32(b, times_at, uint32_t(kMaxHiddenTimes + 1));
  EXPECT_NE(dec(b).message().find("stage times"), std::string::npos) << dec(b).message();
  // A boundary whose shape disagrees with the bytes after it.
  b = enc(h);
  put_u32(b, b.size() - bnd.size() * 4 - 8, 7);
  EXPECT_NE(dec(b).message().find("the frame has"), std::string::npos) << dec(b).message();
  b = enc(h);
  b.pop_back();
  EXPECT_EQ(dec(b).code(), ErrorCode::kInvalidArgument);
  h.n_times = uint32_t(kMaxHiddenTimes + 1);
  EXPECT_THROW(enc(h), Error);
}

TEST(Wire, EncoderRefusesWhatTheDecoderWould) {
  Hello h;
  h.name.assign(kMaxNameBytes + 1, 'x');
  EXPECT_THROW(enc(h), Error);
  const auto bnd = boundary_of(2, 8);
  Batch b;
  b.boundary_tokens = 3, b.hidden = 8, b.boundary = bytes_of(bnd);  // says 3 rows, has 2
  EXPECT_THROW(enc(b), Error);
}

TEST(Wire, TruncatedFramesRefused) {
  const auto bnd = boundary_of(4, 8);
  Batch b;
  b.boundary_tokens = 4, b.hidden = 8, b.boundary = bytes_of(bnd);
  const auto full = enc(b);
  for (size_t n :
       {size_t(0), size_t(3), kHeaderBytes - 1, kHeaderBytes, kHeaderBytes + 10, full.size() - 1}) {
    Status s = dec(std::vector<uint8_t>(full.begin(), full.begin() + n));
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << n;
  }
  // The header alone is enough to learn the length (the link reads it first).
  FrameHeader h;
  EXPECT_TRUE(decode_header(ByteView(full.data(), kHeaderBytes), {}, &h).ok());
  EXPECT_EQ(h.payload_bytes, full.size() - kHeaderBytes);
}

TEST(Wire, OversizeFrameRefusedFromTheHeader) {
  const std::vector<uint8_t> plan(5000, 1);
  const auto b = enc(Plan{plan});
  WireLimits lim;
  lim.max_frame_bytes = 4096;
  Status s = dec(b, lim);
  EXPECT_EQ(s.code(), ErrorCode::kTooLarge);
  EXPECT_NE(s.message().find("4096"), std::string::npos) << s.message();
  FrameHeader h;  // refused before any payload is read
  EXPECT_EQ(decode_header(ByteView(b.data(), kHeaderBytes), lim, &h).code(), ErrorCode::kTooLarge);
}

TEST(Wire, WrongMagicUnknownTypeAndFlagsRefused) {
  auto b = enc(Bye{});
  b[0] = 'X';
  EXPECT_NE(dec(b).message().find("magic"), std::string::npos);
  b = enc(Bye{});
  b[6] = 0;
  EXPECT_NE(dec(b).message().find("unknown frame type 0"), std::string::npos);
  b[6] = kMaxFrameType + 1;
  EXPECT_NE(dec(b).message().find(fmt::format("unknown frame type {}", kMaxFrameType + 1)),
            std::string::npos);
  b = enc(Bye{});
  b[8] = 1;
  EXPECT_NE(dec(b).message().find("flags"), std::string::npos);
}

TEST(Wire, OtherWireVersionRefusedNamingBoth) {
  for (uint16_t v : {uint16_t(kWireVersion - 1), uint16_t(kWireVersion + 1)}) {
    std::vector<uint8_t> b;
    encode_frame(Hello{}, 0, b, v);
    Status s = dec(b);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(s.message().find(fmt::format("wire version {}", v)), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find(fmt::format("version {}", kWireVersion)), std::string::npos);
  }
}

TEST(Wire, LengthDisagreeingWithFieldsRefused) {
  // Trailing bytes past the fields.
  auto b = enc(Ping{1});
  b.push_back(0);
  put_u32(b, 12, 9);
  EXPECT_NE(dec(b).message().find("past its fields"), std::string::npos) << dec(b).message();
  // Header length shorter than what arrived.
  b = enc(Ping{1});
  b.push_back(0);
  EXPECT_NE(dec(b).message().find("arrived"), std::string::npos);
  // A Result whose blob length runs past the frame.
  const std::vector<uint8_t> res(16, 1);
  b = enc(Result{1, 0, res});
  put_u32(b, kHeaderBytes + 12, 17);
  EXPECT_EQ(dec(b).code(), ErrorCode::kInvalidArgument);
  // A Hello with an unknown role.
  b = enc(Hello{});
  b[kHeaderBytes + 2] = 9;
  EXPECT_NE(dec(b).message().find("role"), std::string::npos);
}

TEST(Wire, BoundaryShapeCheckedAgainstLength) {
  const auto bnd = boundary_of(4, 8);
  Batch bt;
  bt.boundary_tokens = 4, bt.hidden = 8, bt.boundary = bytes_of(bnd);
  auto b = enc(bt);
  const size_t tokens_at = b.size() - bnd.size() * 4 - 8;
  put_u32(b, tokens_at, 5);  // says 5 rows, carries 4
  Status s = dec(b);
  EXPECT_NE(s.message().find("160 bytes, the frame has 128"), std::string::npos) << s.message();
  // n x hidden x 4 wrapping 64 bits must not pass as a small size.
  put_u32(b, tokens_at, 0xffffffffu), put_u32(b, tokens_at + 4, 0xffffffffu);
  s = dec(b);
  EXPECT_NE(s.message().find("overflows"), std::string::npos) << s.message();
  // ... nor wrapping 32 bits: 2^30 x 4 x 4 bytes = 2^34.
  put_u32(b, tokens_at, 1u << 30), put_u32(b, tokens_at + 4, 4);
  s = dec(b);
  EXPECT_NE(s.message().find("17179869184 bytes"), std::string::npos) << s.message();
}

TEST(Wire, OversizeNameAndTextRefused) {
  Hello h;
  auto b = enc(h);
  // Grow the name's length field past the bound, and the frame with it.
  const uint32_t n = kMaxNameBytes + 1;
  put_u32(b, kHeaderBytes + 3, n);
  b.insert(b.begin() + kHeaderBytes + 7, n, 'a');
  put_u32(b, 12, uint32_t(b.size() - kHeaderBytes));
  EXPECT_NE(dec(b).message().find("name over"), std::string::npos) << dec(b).message();
  // The encoder cuts a long refusal text rather than send what the peer refuses.
  Frame f = dec_ok(enc(Refuse{ErrorCode::kIo, std::string(5000, 'z')}));
  EXPECT_EQ(std::get<Refuse>(f.payload).text.size(), kMaxRefuseText);
}

TEST(Wire, UnknownErrorCodeInRefuseBecomesInternal) {
  auto b = enc(Refuse{ErrorCode::kIo, "x"});
  put_u32(b, kHeaderBytes, 9999);
  EXPECT_EQ(std::get<Refuse>(dec_ok(b).payload).code, ErrorCode::kInternal);
  // A refusal that says "ok" is no refusal: neither sent nor accepted.
  put_u32(b, kHeaderBytes, 0);
  EXPECT_NE(dec(b).message().find("without an error code"), std::string::npos);
  EXPECT_THROW(enc(Refuse{ErrorCode::kOk, "fine"}), Error);
}

TEST(Wire, SplitEncodingIsTheSameBytes) {
  const auto bnd = boundary_of(3, 8);
  const std::vector<uint8_t> desc = {9, 9};
  Batch b;
  b.batch_id = 5, b.descriptor = desc, b.boundary_tokens = 3, b.hidden = 8;
  b.boundary = bytes_of(bnd);
  for (const Payload& p : {Payload(b), Payload(Ping{3}), Payload(Hello{})}) {
    std::vector<uint8_t> head;
    const ByteView tail = encode_frame_split(p, 4, head);
    head.insert(head.end(), tail.begin(), tail.end());
    EXPECT_EQ(head, enc(p, 4));
    EXPECT_TRUE(dec(head).ok());
  }
  std::vector<uint8_t> head;
  EXPECT_EQ(encode_frame_split(b, 0, head).data(), b.boundary.data());  // not copied
}
