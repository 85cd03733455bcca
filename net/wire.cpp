// net/wire.cpp — frame encode/decode, field by field, every length checked.
#include "net/wire.h"

#include "base/check.h"

namespace kvasir::net {
namespace {

constexpr uint8_t kMagic[4] = {'K', 'V', 'N', 'W'};

template <typename... Args>
Status malformed(fmt::format_string<Args...> f, Args&&... args) {
  return Status(ErrorCode::kInvalidArgument,
                "wire: " + fmt::format(f, std::forward<Args>(args)...));
}

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& out) : out_(out) {}
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { le(v, 2); }
  void u32(uint32_t v) { le(v, 4); }
  void u64(uint64_t v) { le(v, 8); }
  void i32(int32_t v) { u32(uint32_t(v)); }
  void i64(int64_t v) { u64(uint64_t(v)); }
  void raw(ByteView b) { out_.insert(out_.end(), b.begin(), b.end()); }
  // A u32 length, then the bytes.
  void blob(ByteView b) {
    KV_CHECK(b.size() <= UINT32_MAX, "wire: {} bytes do not fit a frame", b.size());
    u32(uint32_t(b.size()));
    raw(b);
  }
  void str(const std::string& s) {
    blob(ByteView(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  }

 private:
  void le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(uint8_t(v >> (8 * i)));
  }
  std::vector<uint8_t>& out_;
};

// Reads from an untrusted span: every getter fails (returns false) rather
// than read past the end, and the caller turns that into a refusal.
class Reader {
 public:
  explicit Reader(ByteView b) : b_(b) {}
  bool u8(uint8_t* v) {
    uint64_t x;
    return le(1, &x) && (*v = uint8_t(x), true);
  }
  bool u16(uint16_t* v) {
    uint64_t x;
    return le(2, &x) && (*v = uint16_t(x), true);
  }
  bool u32(uint32_t* v) {
    uint64_t x;
    return le(4, &x) && (*v = uint32_t(x), true);
  }
  bool u64(uint64_t* v) { return le(8, v); }
  bool i32(int32_t* v) {
    uint32_t x;
    return u32(&x) && (*v = int32_t(x), true);
  }
  bool i64(int64_t* v) {
    uint64_t x;
    return u64(&x) && (*v = int64_t(x), true);
  }
  bool raw(size_t n, ByteView* v) {
    if (n > left()) return false;
    *v = b_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  bool fixed(uint8_t* dst, size_t n) {
    ByteView v;
    if (!raw(n, &v)) return false;
    std::copy(v.begin(), v.end(), dst);
    return true;
  }
  bool blob(ByteView* v) {
    uint32_t n;
    return u32(&n) && raw(n, v);
  }
  bool str(std::string* s, size_t max) {
    ByteView v;
    if (!blob(&v) || v.size() > max) return false;
    s->assign(v.begin(), v.end());
    return true;
  }
  size_t left() const { return b_.size() - pos_; }

 private:
  bool le(int n, uint64_t* v) {
    if (left() < size_t(n)) return false;
    uint64_t x = 0;
    for (int i = 0; i < n; ++i) x |= uint64_t(b_[pos_ + i]) << (8 * i);
    pos_ += n;
    *v = x;
    return true;
  }
  ByteView b_;
  size_t pos_ = 0;
};

// n_tokens x hidden x 4 without wrapping; false when it would.
bool boundary_bytes(uint32_t n_tokens, uint32_t hidden, uint64_t* out) {
  uint64_t n;
  return !__builtin_mul_overflow(uint64_t(n_tokens), uint64_t(hidden), &n) &&
         !__builtin_mul_overflow(n, uint64_t(4), out);
}

void write_hidden(const Hidden& f, Writer& w) {
  uint64_t n = 0;
  KV_CHECK(boundary_bytes(f.boundary_tokens, f.hidden, &n) && n == f.boundary.size(),
           "wire: boundary of {} bytes is not [{}, {}] f32", f.boundary.size(), f.boundary_tokens,
           f.hidden);
  KV_CHECK(f.n_times <= kMaxHiddenTimes, "wire: {} stage times (max {})", f.n_times,
           kMaxHiddenTimes);
  KV_CHECK(f.error.size() <= kMaxRefuseText, "wire: an error of {} bytes", f.error.size());
  w.u16(f.msg_kind), w.u16(f.msg_version), w.i32(f.status), w.i32(f.origin), w.u64(f.batch_id);
  w.u32(f.slot), w.i32(f.n_rows), w.i32(f.n_tokens), w.u32(f.first_stage), w.u32(f.n_times);
  for (uint32_t i = 0; i < f.n_times; ++i) w.u64(f.busy_ns[i]);
  w.str(f.error);
  w.u32(f.boundary_tokens), w.u32(f.hidden);  // the boundary: encode_frame_split's tail
}

void write_payload(const Payload& p, Writer& w) {
  std::visit(
      [&](const auto& f) {
        using T = std::decay_t<decltype(f)>;
        if constexpr (std::is_same_v<T, Hello>) {
          KV_CHECK(f.name.size() <= kMaxNameBytes, "wire: name of {} bytes (max {})", f.name.size(),
                   kMaxNameBytes);
          w.u16(f.wire_version), w.u8(uint8_t(f.role)), w.str(f.name), w.raw(f.nonce);
        } else if constexpr (std::is_same_v<T, Challenge>) {
          w.u16(f.wire_version), w.u8(uint8_t(f.role)), w.raw(f.nonce);
        } else if constexpr (std::is_same_v<T, Proof>) {
          w.raw(f.mac);
        } else if constexpr (std::is_same_v<T, Refuse>) {
          KV_CHECK(f.code != ErrorCode::kOk, "wire: a refusal without an error code");
          w.i32(int32_t(f.code));
          w.str(f.text.size() <= kMaxRefuseText ? f.text : f.text.substr(0, kMaxRefuseText));
        } else if constexpr (std::is_same_v<T, Plan>) {
          w.blob(f.bytes);
        } else if constexpr (std::is_same_v<T, Batch>) {
          uint64_t n = 0;
          KV_CHECK(boundary_bytes(f.boundary_tokens, f.hidden, &n) && n == f.boundary.size(),
                   "wire: boundary of {} bytes is not [{}, {}] f32", f.boundary.size(),
                   f.boundary_tokens, f.hidden);
          w.u16(f.msg_kind), w.u16(f.msg_version), w.i32(f.status), w.u64(f.batch_id);
          w.u32(f.slot), w.i32(f.n_rows), w.i32(f.n_tokens), w.blob(f.descriptor);
          w.u32(f.boundary_tokens), w.u32(f.hidden);  // the boundary: encode_frame_split's tail
        } else if constexpr (std::is_same_v<T, Result>) {
          w.u64(f.batch_id), w.u32(f.slot), w.blob(f.bytes);
        } else if constexpr (std::is_same_v<T, Ping> || std::is_same_v<T, Pong>) {
          w.i64(f.sent_ns);
        } else if constexpr (std::is_same_v<T, Grammar>) {
          w.u32(f.entry), w.u64(f.id), w.blob(f.spec);
        } else if constexpr (std::is_same_v<T, Hidden>) {
          write_hidden(f, w);
        }
      },
      p);
}

Status read_hello(Reader& r, Hello* h) {
  uint8_t role;
  if (!r.u16(&h->wire_version) || !r.u8(&role) || !r.str(&h->name, kMaxNameBytes) ||
      !r.fixed(h->nonce.data(), kNonceBytes))
    return malformed("hello: truncated, or a name over {} bytes", kMaxNameBytes);
  if (role != uint8_t(Role::kLeader) && role != uint8_t(Role::kWorker))
    return malformed("hello: unknown role {}", role);
  h->role = Role(role);
  return Status();
}

Status read_challenge(Reader& r, Challenge* c) {
  uint8_t role;
  if (!r.u16(&c->wire_version) || !r.u8(&role) || !r.fixed(c->nonce.data(), kNonceBytes))
    return malformed("challenge: truncated");
  if (role != uint8_t(Role::kLeader) && role != uint8_t(Role::kWorker))
    return malformed("challenge: unknown role {}", role);
  c->role = Role(role);
  return Status();
}

// The rest of the frame as a boundary [tokens, hidden] f32: exactly that many bytes.
Status read_boundary(Reader& r, const char* what, uint64_t id, uint32_t tokens, uint32_t hidden,
                     ByteView* out) {
  uint64_t n = 0;
  if (!boundary_bytes(tokens, hidden, &n))
    return malformed("{} {}: boundary [{}, {}] f32 overflows", what, id, tokens, hidden);
  if (n != r.left())
    return malformed("{} {}: boundary [{}, {}] f32 is {} bytes, the frame has {}", what, id, tokens,
                     hidden, n, r.left());
  r.raw(n, out);
  return Status();
}

Status read_batch(Reader& r, Batch* b) {
  if (!r.u16(&b->msg_kind) || !r.u16(&b->msg_version) || !r.i32(&b->status) ||
      !r.u64(&b->batch_id) || !r.u32(&b->slot) || !r.i32(&b->n_rows) || !r.i32(&b->n_tokens) ||
      !r.blob(&b->descriptor) || !r.u32(&b->boundary_tokens) || !r.u32(&b->hidden))
    return malformed("batch: truncated fields or descriptor");
  return read_boundary(r, "batch", b->batch_id, b->boundary_tokens, b->hidden, &b->boundary);
}

Status read_hidden(Reader& r, Hidden* h) {
  if (!r.u16(&h->msg_kind) || !r.u16(&h->msg_version) || !r.i32(&h->status) || !r.i32(&h->origin) ||
      !r.u64(&h->batch_id) || !r.u32(&h->slot) || !r.i32(&h->n_rows) || !r.i32(&h->n_tokens) ||
      !r.u32(&h->first_stage) || !r.u32(&h->n_times))
    return malformed("hidden: truncated fields");
  if (h->n_times > kMaxHiddenTimes)
    return malformed("hidden {}: {} stage times (max {})", h->batch_id, h->n_times,
                     kMaxHiddenTimes);
  for (uint32_t i = 0; i < h->n_times; ++i)
    if (!r.u64(&h->busy_ns[i])) return malformed("hidden {}: truncated stage times", h->batch_id);
  if (!r.str(&h->error, kMaxRefuseText) || !r.u32(&h->boundary_tokens) || !r.u32(&h->hidden))
    return malformed("hidden {}: truncated, or an error over {} bytes", h->batch_id,
                     kMaxRefuseText);
  return read_boundary(r, "hidden", h->batch_id, h->boundary_tokens, h->hidden, &h->boundary);
}

Status read_fields(FrameType t, Reader& r, Payload* out) {
  switch (t) {
    case FrameType::kHello:
      return read_hello(r, &out->emplace<Hello>());
    case FrameType::kChallenge:
      return read_challenge(r, &out->emplace<Challenge>());
    case FrameType::kProof:
      if (!r.fixed(out->emplace<Proof>().mac.data(), kMacBytes))
        return malformed("proof: truncated");
      return Status();
    case FrameType::kRefuse: {
      Refuse& f = out->emplace<Refuse>();
      int32_t code;
      if (!r.i32(&code) || !r.str(&f.text, kMaxRefuseText))
        return malformed("refuse: truncated, or a text over {} bytes", kMaxRefuseText);
      if (code == int32_t(ErrorCode::kOk)) return malformed("refuse: without an error code");
      f.code = error_code_from_int(code);
      return Status();
    }
    case FrameType::kPlan:
      if (!r.blob(&out->emplace<Plan>().bytes)) return malformed("plan: truncated");
      return Status();
    case FrameType::kBatch:
      return read_batch(r, &out->emplace<Batch>());
    case FrameType::kResult: {
      Result& f = out->emplace<Result>();
      if (!r.u64(&f.batch_id) || !r.u32(&f.slot) || !r.blob(&f.bytes))
        return malformed("result: truncated");
      return Status();
    }
    case FrameType::kPing:
      if (!r.i64(&out->emplace<Ping>().sent_ns)) return malformed("ping: truncated");
      return Status();
    case FrameType::kPong:
      if (!r.i64(&out->emplace<Pong>().sent_ns)) return malformed("pong: truncated");
      return Status();
    case FrameType::kReady:
      out->emplace<Ready>();
      return Status();
    case FrameType::kBye:
      out->emplace<Bye>();
      return Status();
    case FrameType::kGrammar: {
      Grammar& f = out->emplace<Grammar>();
      if (!r.u32(&f.entry) || !r.u64(&f.id) || !r.blob(&f.spec))
        return malformed("grammar: truncated");
      if (f.id == 0) return malformed("grammar: entry {} under id 0 (empty)", f.entry);
      return Status();
    }
    case FrameType::kHidden:
      return read_hidden(r, &out->emplace<Hidden>());
  }
  return malformed("unknown frame type {}", uint16_t(t));
}

}  // namespace

const char* frame_type_name(FrameType t) {
  static const char* const names[] = {"?",    "hello", "challenge", "proof",  "refuse",
                                      "plan", "ready", "batch",     "result", "ping",
                                      "pong", "bye",   "grammar",   "hidden"};
  const auto i = uint16_t(t);
  return i <= kMaxFrameType ? names[i] : "unknown";
}

FrameType type_of(const Payload& p) {
  return FrameType(p.index() + 1);
}

ByteView encode_frame_split(const Payload& p, uint64_t seq, std::vector<uint8_t>& out,
                            uint16_t version) {
  const size_t start = out.size();
  Writer w(out);
  w.raw(ByteView(kMagic, 4));
  w.u16(version), w.u16(uint16_t(type_of(p))), w.u32(0), w.u32(0), w.u64(seq);
  write_payload(p, w);
  ByteView tail;
  if (const auto* batch = std::get_if<Batch>(&p)) tail = batch->boundary;
  if (const auto* hidden = std::get_if<Hidden>(&p)) tail = hidden->boundary;
  const uint64_t n = out.size() - start - kHeaderBytes + tail.size();
  KV_CHECK(n <= UINT32_MAX - kHeaderBytes, "wire: a {}-byte payload does not fit a frame", n);
  for (int i = 0; i < 4; ++i) out[start + 12 + i] = uint8_t(n >> (8 * i));
  return tail;
}

void encode_frame(const Payload& p, uint64_t seq, std::vector<uint8_t>& out, uint16_t version) {
  const ByteView tail = encode_frame_split(p, seq, out, version);
  out.insert(out.end(), tail.begin(), tail.end());
}

Status decode_header(ByteView bytes, const WireLimits& limits, FrameHeader* out) {
  if (bytes.size() < kHeaderBytes)
    return malformed("truncated header: {} of {} bytes", bytes.size(), kHeaderBytes);
  if (!std::equal(kMagic, kMagic + 4, bytes.begin()))
    return malformed("not a Kvasir frame (magic {:02x}{:02x}{:02x}{:02x}, expected \"KVNW\")",
                     bytes[0], bytes[1], bytes[2], bytes[3]);
  Reader r(bytes.subspan(4, kHeaderBytes - 4));
  uint16_t type = 0;
  r.u16(&out->version), r.u16(&type), r.u32(&out->flags), r.u32(&out->payload_bytes);
  r.u64(&out->seq);
  if (out->version != kWireVersion)
    return malformed(
        "the peer speaks wire version {}, this build speaks version {}: run the same "
        "Kvasir release on both hosts",
        out->version, kWireVersion);
  if (type < 1 || type > kMaxFrameType) return malformed("unknown frame type {}", type);
  out->type = FrameType(type);
  if (out->flags != 0)
    return malformed("{} frame with unknown flags {:#x}", frame_type_name(out->type), out->flags);
  if (uint64_t(out->payload_bytes) + kHeaderBytes > limits.max_frame_bytes)
    return Status(
        ErrorCode::kTooLarge,
        fmt::format("wire: {} frame of {} bytes over the limit of {}", frame_type_name(out->type),
                    uint64_t(out->payload_bytes) + kHeaderBytes, limits.max_frame_bytes));
  return Status();
}

Status decode_payload(const FrameHeader& h, ByteView payload, Payload* out) {
  if (payload.size() != h.payload_bytes)
    return malformed("{} frame: header says {} payload bytes, {} arrived", frame_type_name(h.type),
                     h.payload_bytes, payload.size());
  Reader r(payload);
  KV_RETURN_IF_ERROR(read_fields(h.type, r, out));
  if (r.left() != 0)
    return malformed("{} frame: {} bytes past its fields", frame_type_name(h.type), r.left());
  return Status();
}

Status decode_frame(ByteView bytes, const WireLimits& limits, Frame* out) {
  KV_RETURN_IF_ERROR(decode_header(bytes, limits, &out->header));
  return decode_payload(out->header, bytes.subspan(kHeaderBytes), &out->payload);
}

}  // namespace kvasir::net
