// daemon/api/tool_calls.cpp — see tool_calls.h.
#include "daemon/api/tool_calls.h"

#include <fmt/format.h>

#include <algorithm>

#include "daemon/api/harmony.h"

namespace kvasir {

using nlohmann::ordered_json;

namespace {

constexpr std::string_view kHermesOpen = "<tool_call>", kHermesClose = "</tool_call>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";

bool is_ws(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

// The end of the JSON string starting at s[i] == '"', or npos if cut short.
size_t string_end(std::string_view s, size_t i) {
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\')
      ++i;
    else if (s[i] == '"')
      return i + 1;
  }
  return std::string_view::npos;
}

// The end of the JSON value starting at s[i], or npos if cut short (a number
// or literal at the very end may go on). Not a validator: the model's text
// is only split here; the client parses the arguments.
size_t value_end(std::string_view s, size_t i) {
  if (i >= s.size()) return std::string_view::npos;
  if (s[i] == '"') return string_end(s, i);
  if (s[i] == '{' || s[i] == '[') {
    int depth = 0;
    for (; i < s.size(); ++i) {
      const char c = s[i];
      if (c == '"') {
        i = string_end(s, i);
        if (i == std::string_view::npos) return i;
        --i;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        return i + 1;
      }
    }
    return std::string_view::npos;
  }
  while (i < s.size() && !is_ws(s[i]) && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ';')
    ++i;
  return i < s.size() ? i : std::string_view::npos;
}

// The length of the longest suffix of `s` that is a proper prefix of `m`.
size_t partial_marker(std::string_view s, std::string_view m) {
  for (size_t n = std::min(s.size(), m.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == m.substr(0, n)) return n;
  return 0;
}

std::string quoted(const std::string& s) {
  return ordered_json(s).dump();
}

}  // namespace

// What is known of one call object {"name": ..., "arguments": ...}.
struct ToolCallStream::Scan {
  bool complete = false;  // its closing brace seen
  size_t end = 0;         // past it
  bool bad = false;       // not an object of keys and values
  bool has_name = false;
  std::string name;
  size_t a0 = std::string_view::npos, a1 = std::string_view::npos;  // the arguments' text
};

namespace {

void scan_object(std::string_view s, ToolCallStream::Scan& out);

}  // namespace

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes:
      return "hermes";
    case ToolFormat::kLlama3Json:
      return "llama3_json";
    case ToolFormat::kMistral:
      return "mistral";
    case ToolFormat::kHarmony:
      return "harmony";
  }
  return "hermes";
}

ToolFormat detect_tool_format(std::string_view src) {
  if (src.find("<|channel|>") != std::string_view::npos) return ToolFormat::kHarmony;
  if (src.find("[TOOL_CALLS]") != std::string_view::npos) return ToolFormat::kMistral;
  if (src.find("<tool_call>") != std::string_view::npos) return ToolFormat::kHermes;
  if (src.find("<|python_tag|>") != std::string_view::npos ||
      src.find("\"parameters\": ") != std::string_view::npos)
    return ToolFormat::kLlama3Json;
  return ToolFormat::kHermes;
}

OutputConstraint tool_call_constraint(ToolFormat f, const ordered_json& tools,
                                      const std::string& only, bool parallel, int max_ws) {
  const std::string key = f == ToolFormat::kLlama3Json ? "parameters" : "arguments";
  ordered_json tags = ordered_json::array();
  for (const auto& t : tools) {
    const std::string name = t["function"]["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    ordered_json params = t["function"].value("parameters", ordered_json(nullptr));
    if (!params.is_object()) params = {{"type", "object"}, {"properties", ordered_json::object()}};
    std::string begin = "{\"name\": " + quoted(name) + ", \"" + key + "\": ";
    std::string end = "}";
    if (f == ToolFormat::kHermes) begin = "<tool_call>\n" + begin, end += "\n</tool_call>";
    tags.push_back(
        {{"type", "tag"},
         {"begin", begin},
         {"content",
          {{"type", "json_schema"}, {"json_schema", params}, {"max_whitespace_cnt", max_ws}}},
         {"end", end}});
  }
  const char* sep = f == ToolFormat::kHermes ? "\n" : f == ToolFormat::kMistral ? ", " : "; ";
  ordered_json calls = {{"type", "tags_with_separator"},
                        {"tags", tags},
                        {"separator", sep},
                        {"at_least_one", true},
                        {"stop_after_first", !parallel || !only.empty()}};
  if (f == ToolFormat::kMistral)
    calls = {{"type", "sequence"},
             {"elements",
              {{{"type", "const_string"}, {"value", "["}},
               calls,
               {{"type", "const_string"}, {"value", "]"}}}}};
  ordered_json st = {{"type", "structural_tag"}, {"format", calls}};
  return OutputConstraint{OutputConstraint::Kind::kStructuralTag, st.dump(), {}, "tools"};
}

namespace {

void scan_object(std::string_view s, ToolCallStream::Scan& out) {
  out = {};
  size_t i = 1;
  for (;;) {
    i = skip_ws(s, i);
    if (i >= s.size()) return;
    if (s[i] == '}') {
      out.complete = true, out.end = i + 1;
      return;
    }
    if (s[i] == ',') {
      ++i;
      continue;
    }
    if (s[i] != '"') return void(out.bad = true);
    const size_t k1 = string_end(s, i);
    if (k1 == std::string_view::npos) return;
    std::string key;
    try {
      key = ordered_json::parse(s.substr(i, k1 - i)).get<std::string>();
    } catch (const std::exception&) {
      return void(out.bad = true);
    }
    i = skip_ws(s, k1);
    if (i >= s.size()) return;
    if (s[i] != ':') return void(out.bad = true);
    const size_t v0 = skip_ws(s, i + 1);
    if (v0 >= s.size()) return;
    const size_t v1 = value_end(s, v0);
    if (key == "arguments" || key == "parameters") out.a0 = v0, out.a1 = v1;
    if (v1 == std::string_view::npos) return;
    if (key == "name" && s[v0] == '"') {
      try {
        out.name = ordered_json::parse(s.substr(v0, v1 - v0)).get<std::string>();
        out.has_name = true;
      } catch (const std::exception&) {
        return void(out.bad = true);
      }
    }
    i = v1;
  }
}

}  // namespace

ToolCallStream::ToolCallStream(ToolFormat f, bool constrained, uint64_t id_seed)
    : f_(f), constrained_(constrained), seed_(id_seed) {
  if (f == ToolFormat::kHarmony) harmony_ = std::make_unique<HarmonyStream>(id_seed);
}
ToolCallStream::ToolCallStream(ToolCallStream&&) noexcept = default;
ToolCallStream::~ToolCallStream() = default;

const std::vector<ToolCall>& ToolCallStream::calls() const {
  return harmony_ ? harmony_->calls() : calls_;
}
bool ToolCallStream::cut() const {
  return harmony_ ? harmony_->cut() : cut_;
}
const std::string& ToolCallStream::content() const {
  return harmony_ ? harmony_->content() : content_;
}
const std::string& ToolCallStream::reasoning() const {
  static const std::string kNone;
  return harmony_ ? harmony_->reasoning() : kNone;
}

std::string tool_call_id(uint64_t seed, size_t index, ToolFormat f) {
  uint64_t h = seed ^ (0x9E3779B97F4A7C15ull * (index + 1));
  auto next = [&] {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
  };
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = f == ToolFormat::kMistral ? "" : "call_";
  const size_t n = f == ToolFormat::kMistral ? 9 : 24;  // Mistral's templates take 9
  for (size_t i = 0; i < n; ++i) id += kAlnum[next() % 62];
  return id;
}

// Harmony's parser, its Out as this one's.
static ToolCallStream::Out from_harmony(HarmonyStream::Out o) {
  return {std::move(o.content), std::move(o.reasoning), std::move(o.deltas)};
}

ToolCallStream::Out ToolCallStream::push(std::string_view text) {
  if (harmony_) return from_harmony(harmony_->push(text));
  text_.append(text);
  Out out;
  step(out, false);
  return out;
}

ToolCallStream::Out ToolCallStream::finish() {
  if (harmony_) return from_harmony(harmony_->finish());
  Out out;
  step(out, true);
  if (call_open_) {  // cut short (max_tokens, a stop string): ended as it stands
    cut_ = true;
    if (calls_.back().arguments.empty()) {
      calls_.back().arguments = "{}";
      out.deltas.push_back({calls_.size() - 1, false, "", "", "{}"});
    }
    call_open_ = false;
  }
  if (calls_.empty() && !held_ws_.empty()) {
    out.content += held_ws_;
    content_ += held_ws_;
  }
  held_ws_.clear();
  return out;
}

void ToolCallStream::step(Out& out, bool end) {
  // Each step that returns true consumed text or changed mode; the bound is
  // a guard, not a limit a valid text reaches.
  for (size_t guard = 0; guard < 4 * text_.size() + 16; ++guard)
    if (!(in_calls_ ? call_step(out, end) : content_step(out, end))) return;
}

// Content up to the next call's start (or what cannot be part of one).
// True when the calls' region begins (the caller goes on).
bool ToolCallStream::content_step(Out& out, bool end) {
  std::string_view rest = std::string_view(text_).substr(pos_);
  if (f_ == ToolFormat::kLlama3Json || (f_ == ToolFormat::kMistral && constrained_)) {
    // Calls only at the very start: a '{' (or '[') before anything else.
    if (!began_) {
      const size_t i = skip_ws(rest, 0);
      if (i == rest.size() && !end) return false;
      began_ = true;
      const char open = f_ == ToolFormat::kLlama3Json ? '{' : '[';
      if (i < rest.size() && rest[i] == open) {
        held_ws_.clear();
        pos_ += i + (f_ == ToolFormat::kMistral ? 1 : 0);
        in_calls_ = true;
        region_open_ = f_ == ToolFormat::kMistral;
        return true;
      }
    }
    if (f_ == ToolFormat::kLlama3Json) {
      emit_content(out, rest, end);
      pos_ = text_.size();
      return false;
    }
  }
  const std::string_view marker = f_ == ToolFormat::kMistral ? kMistralOpen : kHermesOpen;
  const size_t at = rest.find(marker);
  if (at == std::string_view::npos) {
    const size_t keep = end ? 0 : partial_marker(rest, marker);
    emit_content(out, rest.substr(0, rest.size() - keep), end);
    pos_ += rest.size() - keep;
    return false;
  }
  emit_content(out, rest.substr(0, at), end);
  held_ws_.clear();  // whitespace before a call is not content
  pos_ += at + marker.size();
  in_calls_ = true;
  began_ = true;
  return true;
}

// Text to the client as content, but for its trailing whitespace, which
// is held until more content comes: at a call (or the end, when there are
// calls) it is dropped. Whatever the pieces, the same text is sent.
void ToolCallStream::emit_content(Out& out, std::string_view text, bool end) {
  (void)end;
  held_ws_.append(text);
  size_t n = held_ws_.size();
  while (n > 0 && is_ws(held_ws_[n - 1])) --n;
  if (n == 0) return;
  out.content.append(held_ws_, 0, n);
  content_.append(held_ws_, 0, n);
  held_ws_.erase(0, n);
  began_ = true;
}

// The calls' region: one call object at a time, in the family's framing.
// True when something moved (the caller goes on).
bool ToolCallStream::call_step(Out& out, bool end) {
  if (expect_close_) return close_step(end);
  const std::string_view rest = std::string_view(text_).substr(pos_);
  size_t i = skip_ws(rest, 0);
  if (i < rest.size() && !call_open_) {
    // Between calls: llama3's ';', mistral's '[', ',' and ']'.
    const char c = rest[i];
    if (f_ == ToolFormat::kLlama3Json && c == ';') return pos_ += i + 1, true;
    if (f_ == ToolFormat::kMistral && !region_open_ && c == '[')
      return region_open_ = true, pos_ += i + 1, true;
    if (f_ == ToolFormat::kMistral && region_open_ && c == ',') return pos_ += i + 1, true;
    if (f_ == ToolFormat::kMistral && region_open_ && c == ']')
      return region_open_ = in_calls_ = false, pos_ += i + 1, true;
  }
  if (i == rest.size()) {
    if (end) in_calls_ = false, pos_ = text_.size();
    return false;
  }
  if (rest[i] != '{') {  // not a call after all: the rest is content
    if (f_ == ToolFormat::kHermes && !call_open_) emit_content(out, kHermesOpen, end);
    in_calls_ = region_open_ = false;
    return true;
  }
  Scan s;
  const std::string_view body = rest.substr(i);
  scan_object(body, s);
  if (s.bad || (s.complete && !s.has_name && !call_open_)) {  // not a call: content
    emit_content(out, rest.substr(0, i + (s.complete ? s.end : body.size())), end);
    pos_ += i + (s.complete ? s.end : body.size());
    in_calls_ = region_open_ = false;
    return true;
  }
  update_call(out, s, body, s.complete);
  if (!s.complete) return false;
  pos_ += i + s.end;
  expect_close_ = f_ == ToolFormat::kHermes;
  return true;
}

// Hermes: after a call's object, its closing tag; anything else there is
// content (the call stands as written).
bool ToolCallStream::close_step(bool end) {
  const std::string_view rest = std::string_view(text_).substr(pos_);
  const size_t j = skip_ws(rest, 0);
  const std::string_view tail = rest.substr(j);
  if (tail.substr(0, kHermesClose.size()) == kHermesClose) {
    pos_ += j + kHermesClose.size();
  } else if (kHermesClose.substr(0, tail.size()) == tail) {
    if (!end) return false;  // the tag may be on its way
    pos_ = text_.size();     // the tag cut by the end: call syntax, never content
  }
  expect_close_ = in_calls_ = false;
  return true;
}

// Call `calls_.back()` (opened once its name is known) gets the arguments
// text written so far beyond what it has; `done`: its object is closed.
void ToolCallStream::update_call(Out& out, const Scan& s, std::string_view body, bool done) {
  if (!call_open_) {
    if (!s.has_name) return;
    const size_t k = calls_.size();
    calls_.push_back({tool_call_id(seed_, k, f_), s.name, ""});
    call_open_ = true;
    out.deltas.push_back({k, true, calls_.back().id, s.name, ""});
  }
  ToolCall& c = calls_.back();
  std::string add;
  if (s.a0 != std::string_view::npos && body[s.a0] == '"') {
    // A JSON string holding the arguments: its contents, once it is whole.
    if (s.a1 != std::string_view::npos && c.arguments.empty()) {
      try {
        add = ordered_json::parse(body.substr(s.a0, s.a1 - s.a0)).get<std::string>();
      } catch (const std::exception&) {
        add = std::string(body.substr(s.a0, s.a1 - s.a0));
      }
    }
  } else if (s.a0 != std::string_view::npos) {
    const std::string_view avail =
        s.a1 != std::string_view::npos ? body.substr(s.a0, s.a1 - s.a0) : body.substr(s.a0);
    if (avail.size() > c.arguments.size()) add = avail.substr(c.arguments.size());
  }
  if (done && c.arguments.empty() && add.empty()) add = "{}";
  if (!add.empty()) {
    c.arguments += add;
    out.deltas.push_back({calls_.size() - 1, false, "", "", std::move(add)});
  }
  if (done) call_open_ = false;
}

}  // namespace kvasir
