// grammar/xgrammar_hooks.h — what grammar/xgrammar_hooks.cpp offers the
// module: XGrammar's error messages cleaned up, and its warnings captured.
// C++17 (the hooks are compiled with XGrammar, grammar/xgrammar.cmake).
#pragma once

#include <exception>
#include <string>
#include <vector>

namespace kvasir::grammar::detail {

// The message of an exception thrown inside XGrammar, without the time and
// source location its LogFatalError puts first (XGrammar's own words after
// that: "Check failed: (...) is false: ..." is trimmed to what follows).
std::string xgrammar_message(const std::exception& e);

// While alive, the warnings XGrammar logs on this thread are collected here
// instead of logged (one compilation runs on one thread). Elsewhere they go to
// the log at debug level (component "grammar").
class WarningCapture {
 public:
  WarningCapture();
  ~WarningCapture();
  WarningCapture(const WarningCapture&) = delete;
  WarningCapture& operator=(const WarningCapture&) = delete;
  std::vector<std::string> take();

 private:
  std::vector<std::string> warnings_;
  WarningCapture* outer_;
};

}  // namespace kvasir::grammar::detail
