// grammar/matcher.cpp — Matcher: one request's XGrammar GrammarMatcher.
//
// Tokens XGrammar would refuse with a logged warning (out of range, special,
// anything once terminated) are refused here first, quietly: a sampler that
// offers them is not an event worth a log line.
//
// UTF-8 across tokens: when the output so far ends with a lead byte whose
// second byte has a narrower range (utf8_second_byte_ok: E0, ED, F0, F4),
// tokens that would continue it out of range are taken out of the mask and
// refused; XGrammar would take them. Within a token the Vocabulary has
// already done this.
#include <algorithm>

#include "base/check.h"
#include "grammar/xgrammar_bridge.h"

namespace kvasir::grammar {

struct Matcher::Impl {
  std::shared_ptr<const CompiledGrammar> grammar;
  xgrammar::GrammarMatcher matcher;
  size_t accepted = 0;
  uint8_t last = 0;            // the last byte of the output so far (0 at its start)
  std::vector<uint8_t> lasts;  // `last` before each accepted token, for rollback

  // Whether token `bytes` may follow the output so far, as UTF-8.
  bool continues_utf8(const std::string& bytes) const {
    return bytes.empty() || utf8_second_byte_ok(last, uint8_t(bytes[0]));
  }
  // Clears the mask bits of the tokens that would break a UTF-8 sequence.
  void mask_utf8(std::span<uint32_t> mask, const Vocabulary& v) const {
    if (!utf8_narrow_lead(last)) return;
    for (size_t w = 0; w < mask.size(); ++w)
      for (uint32_t bits = mask[w]; bits != 0; bits &= bits - 1) {
        const auto id = int32_t(w * 32 + size_t(__builtin_ctz(bits)));
        if (id < v.size() && !continues_utf8(v.token_bytes(id)))
          mask[w] &= ~(uint32_t(1) << (id % 32));
      }
  }
};

namespace {

[[noreturn]] void fail(const char* what, const std::exception& e) {
  KV_FAIL_CODE(ErrorCode::kInternal, "grammar matcher: {}: {}", what, detail::xgrammar_message(e));
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar) {
  KV_CHECK_CODE(grammar != nullptr, ErrorCode::kInternal, "grammar matcher: no grammar");
  try {
    xgrammar::GrammarMatcher m(grammar->impl().compiled);
    impl_ = std::make_unique<Impl>(Impl{std::move(grammar), std::move(m), 0, 0, {}});
  } catch (const std::exception& e) {
    fail("cannot start", e);
  }
}

Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

int32_t Matcher::vocab_size() const {
  return impl_->grammar->vocabulary()->size();
}

size_t Matcher::mask_words() const {
  return impl_->grammar->vocabulary()->mask_words();
}

bool Matcher::fill_next_token_bitmask(std::span<uint32_t> mask) {
  const size_t words = mask_words();
  KV_CHECK_CODE(!is_terminated(), ErrorCode::kInternal,
                "grammar matcher: no next token after the output ended");
  KV_CHECK_CODE(mask.size() >= words, ErrorCode::kInternal,
                "grammar matcher: a mask of {} words for {} tokens needs {}", mask.size(),
                vocab_size(), words);
  int64_t shape[1] = {int64_t(words)};
  DLTensor t{};
  t.data = mask.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  bool restricted;
  try {
    restricted = impl_->matcher.FillNextTokenBitmask(&t);
  } catch (const std::exception& e) {
    fail("cannot fill the mask", e);
  }
  if (const int tail = vocab_size() % 32; tail != 0)
    mask[words - 1] &= (uint32_t(1) << tail) - 1;  // no ids past the vocabulary
  impl_->mask_utf8(mask.first(words), *impl_->grammar->vocabulary());
  return restricted;
}

bool Matcher::accept(int32_t id) {
  const Vocabulary& v = *impl_->grammar->vocabulary();
  if (id < 0 || id >= v.size() || is_terminated()) return false;
  const std::string& bytes = v.token_bytes(id);
  if (bytes.empty() && !std::binary_search(v.stop_ids().begin(), v.stop_ids().end(), id))
    return false;  // special or padding: never part of an output
  if (!impl_->continues_utf8(bytes)) return false;
  bool ok;
  try {
    ok = impl_->matcher.AcceptToken(id);
  } catch (const std::exception& e) {
    fail("cannot accept a token", e);
  }
  if (ok) {
    ++impl_->accepted;
    impl_->lasts.push_back(impl_->last);
    if (!bytes.empty()) impl_->last = uint8_t(bytes.back());
  }
  return ok;
}

size_t Matcher::accept_all(std::span<const int32_t> ids) {
  size_t n = 0;
  while (n < ids.size() && accept(ids[n])) ++n;
  return n;
}

bool Matcher::rollback(size_t n) {
  if (n > impl_->accepted) return false;
  if (n == 0) return true;
  try {
    impl_->matcher.Rollback(int(n));
  } catch (const std::exception& e) {
    fail("cannot roll back", e);
  }
  impl_->accepted -= n;
  impl_->last = impl_->lasts[impl_->accepted];
  impl_->lasts.resize(impl_->accepted);
  return true;
}

void Matcher::reset() {
  impl_->matcher.Reset();
  impl_->accepted = 0;
  impl_->last = 0;
  impl_->lasts.clear();
}

std::vector<int32_t> Matcher::forced_tokens(size_t max) const {
  if (max == 0 || is_terminated()) return {};
  std::vector<int32_t> ids;
  try {
    ids = impl_->matcher.FindJumpForwardTokens();
  } catch (const std::exception& e) {
    fail("cannot find the forced tokens", e);
  }
  // Only ids the sampler could emit: inside the vocabulary, not special
  // (a draft the target cannot produce would only be rejected).
  const Vocabulary& v = *impl_->grammar->vocabulary();
  size_t n = 0;
  while (n < ids.size() && n < max && ids[n] >= 0 && ids[n] < v.size() &&
         !v.token_bytes(ids[n]).empty())
    ++n;
  ids.resize(n);
  return ids;
}

std::string Matcher::forced_string() {
  if (is_terminated()) return {};
  try {
    return impl_->matcher.FindJumpForwardString();
  } catch (const std::exception& e) {
    fail("cannot find the forced string", e);
  }
}

bool Matcher::is_terminated() const {
  return impl_->matcher.IsTerminated();
}

bool Matcher::can_terminate() const {
  return impl_->matcher.IsCompleted();
}

size_t Matcher::num_accepted() const {
  return impl_->accepted;
}

}  // namespace kvasir::grammar
