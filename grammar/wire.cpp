// grammar/wire.cpp — encode_spec / decode_spec: a GrammarSpec as bytes, the
// form in which it crosses from the daemon to the tail stage.
//
//   u8 format version (kWireVersion) | u8 kind | u8 strict |
//   u32 text bytes | text | u32 choices | (u32 bytes | choice)*
//
// Little-endian, as every process of an instance runs on the one machine.
#include <cstring>

#include "base/check.h"
#include "grammar/grammar.h"

namespace kvasir::grammar {
namespace {

constexpr uint8_t kWireVersion = 1;

void put_u32(std::string& out, uint32_t v) {
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}

// Reads from a byte string, refusing every read past its end.
struct Reader {
  std::string_view in;
  size_t pos = 0;
  bool u8(uint8_t* v) {
    if (pos + 1 > in.size()) return false;
    *v = uint8_t(in[pos++]);
    return true;
  }
  bool u32(uint32_t* v) {
    if (in.size() - pos < 4) return false;
    std::memcpy(v, in.data() + pos, 4);
    pos += 4;
    return true;
  }
  bool bytes(std::string* s) {
    uint32_t n = 0;
    if (!u32(&n) || in.size() - pos < n) return false;
    s->assign(in.data() + pos, n);
    pos += n;
    return true;
  }
};

Status bad(const char* why) {
  return error_status(ErrorCode::kInvalidArgument, "grammar spec on the wire: {}", why);
}

}  // namespace

std::string encode_spec(const GrammarSpec& spec) {
  std::string out;
  out.reserve(16 + spec.text.size());
  out.push_back(char(kWireVersion));
  out.push_back(char(spec.kind));
  out.push_back(char(spec.strict ? 1 : 0));
  KV_CHECK(spec.text.size() <= UINT32_MAX && spec.choices.size() <= UINT32_MAX,
           "grammar spec: too large to encode");
  put_u32(out, uint32_t(spec.text.size()));
  out += spec.text;
  put_u32(out, uint32_t(spec.choices.size()));
  for (const std::string& c : spec.choices) {
    KV_CHECK(c.size() <= UINT32_MAX, "grammar spec: a choice too large to encode");
    put_u32(out, uint32_t(c.size()));
    out += c;
  }
  return out;
}

Status decode_spec(std::string_view bytes, GrammarSpec* out) {
  KV_CHECK(out != nullptr, "decode_spec: no output");
  Reader r{bytes};
  uint8_t version = 0, kind = 0, strict = 0;
  if (!r.u8(&version) || version != kWireVersion) return bad("unknown format version");
  if (!r.u8(&kind) || kind > uint8_t(GrammarKind::kStructuralTag)) return bad("unknown kind");
  if (!r.u8(&strict) || strict > 1) return bad("bad strict flag");
  GrammarSpec s;
  s.kind = GrammarKind(kind);
  s.strict = strict != 0;
  uint32_t n = 0;
  if (!r.bytes(&s.text) || !r.u32(&n)) return bad("truncated");
  // Each choice takes at least its 4-byte length: a count beyond what is
  // left is refused before anything is allocated for it.
  if (n > (bytes.size() - r.pos) / 4) return bad("more choices than bytes");
  s.choices.resize(n);
  for (std::string& c : s.choices)
    if (!r.bytes(&c)) return bad("truncated");
  if (r.pos != bytes.size()) return bad("bytes after the end");
  *out = std::move(s);
  return {};
}

}  // namespace kvasir::grammar
