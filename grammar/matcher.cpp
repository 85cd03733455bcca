// grammar/matcher.cpp — Matcher: one request's XGrammar GrammarMatcher.
//
// Tokens XGrammar would refuse with a logged warning (out of range, special,
// anything once terminated) are refused here first, quietly: a sampler that
// offers them is not an event worth a log line.
#include <algorithm>

#include "base/check.h"
#include "grammar/xgrammar_bridge.h"

namespace kvasir::grammar {

struct Matcher::Impl {
  std::shared_ptr<const CompiledGrammar> grammar;
  xgrammar::GrammarMatcher matcher;
  size_t accepted = 0;
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
    impl_ = std::make_unique<Impl>(Impl{std::move(grammar), std::move(m), 0});
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
  return restricted;
}

bool Matcher::accept(int32_t id) {
  const Vocabulary& v = *impl_->grammar->vocabulary();
  if (id < 0 || id >= v.size() || is_terminated()) return false;
  if (v.token_bytes(id).empty() &&
      !std::binary_search(v.stop_ids().begin(), v.stop_ids().end(), id))
    return false;  // special or padding: never part of an output
  bool ok;
  try {
    ok = impl_->matcher.AcceptToken(id);
  } catch (const std::exception& e) {
    fail("cannot accept a token", e);
  }
  if (ok) ++impl_->accepted;
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
  return true;
}

void Matcher::reset() {
  impl_->matcher.Reset();
  impl_->accepted = 0;
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
