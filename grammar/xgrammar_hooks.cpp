// grammar/xgrammar_hooks.cpp — XGrammar's logging, routed to Kvasir's.
//
// XGrammar is built with XGRAMMAR_LOG_CUSTOMIZE=1 (grammar/xgrammar.cmake),
// its documented hook: the two functions below replace its default logger,
// which writes warnings straight to stderr. Fatal errors still throw its
// LogFatalError (its own code catches that type); warnings go to the
// innermost WarningCapture on this thread, else to the log at debug level.
// Compiled into kvasir_xgrammar, as the library needs these symbols.
#include "grammar/xgrammar_hooks.h"

#include <string>

#include "base/log.h"
#include "support/logging.h"  // XGrammar's (cpp/support/): LogFatalError, the hook's declarations

namespace kvasir::grammar::detail {
namespace {

thread_local WarningCapture* t_capture = nullptr;
thread_local std::vector<std::string>* t_sink = nullptr;

// "Check failed: (cond) is false: why" -> "why" (the condition is code, not
// something a user can act on); kept whole when there is no "why".
std::string trim_check(std::string s) {
  for (const char* head : {"Check failed: (", "Internal check failed: ("}) {
    if (s.rfind(head, 0) != 0) continue;
    const size_t end = s.find(") is false: ");
    if (end != std::string::npos && end + 12 < s.size()) s.erase(0, end + 12);
  }
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

void record_warning(std::string message) {
  if (t_sink != nullptr) {
    t_sink->push_back(std::move(message));
  } else {
    KV_LOG_DEBUG("grammar", "xgrammar: {}", message);
  }
}

}  // namespace

WarningCapture::WarningCapture() : outer_(t_capture) {
  t_capture = this;
  t_sink = &warnings_;
}

WarningCapture::~WarningCapture() {
  t_capture = outer_;
  t_sink = outer_ ? &outer_->warnings_ : nullptr;
}

std::vector<std::string> WarningCapture::take() {
  return std::move(warnings_);
}

std::string xgrammar_message(const std::exception& e) {
  if (auto* fatal = dynamic_cast<const xgrammar::LogFatalError*>(&e))
    return trim_check(fatal->std::runtime_error::what());  // the message without its prefix
  return trim_check(e.what());
}

}  // namespace kvasir::grammar::detail

namespace xgrammar {

void LogFatalImpl(const std::string& file, int lineno, const std::string& message) {
  throw LogFatalError(file, lineno, message);
}

void LogMessageImpl(const std::string& file, int lineno, int level, const std::string& message) {
  if (level == XGRAMMAR_LOG_LEVEL_WARNING) {
    kvasir::grammar::detail::record_warning(message);
  } else {  // info and debug: only XGrammar's debug_print paths, which we never enable
    KV_LOG_TRACE("grammar", "xgrammar {}:{}: {}", file, lineno, message);
  }
}

}  // namespace xgrammar
