// base/log.h — the one logger: leveled, with a component prefix, to stderr.
//
//   KV_LOG_INFO("engine", "recovered in {:.3f} s", s);
//   KV_LOG_WARN("agent", "refused a message: {}", why);
//
// A line reads "2026-12-01 05:30:01.123 I kvasird engine: recovered in 0.3 s"
// on a terminal. When stderr is the systemd journal (JOURNAL_STREAM names
// stderr's device and inode, as systemd sets it), the line is
// "<6>engine: recovered in 0.3 s" instead: journald reads the sd-daemon
// priority prefix and adds its own time and process name.
//
// The level comes from `--log-level` or `[log] level` in the config
// (trace, debug, info, warn, error, off; default info); stage processes get
// the daemon's. Built on spdlog (Debian's libspdlog, over the same fmt);
// no other file includes spdlog. Thread-safe.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>
#include <string_view>

namespace kvasir::log {

enum class Level { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

// "trace" ... "off"; nullopt for anything else.
std::optional<Level> parse_level(std::string_view name);
const char* level_name(Level l);

struct Options {
  std::string process = "kvasir";  // "kvasird", "kvasird stage 1", ...
  Level level = Level::kInfo;
  // Journal prefixes: -1 = detect (JOURNAL_STREAM), 0 = never, 1 = always.
  int journal = -1;
};

// Sets up the process's logger; call again to change anything. Before the
// first call lines go to stderr at info, process "kvasir".
void init(const Options& opt);
void set_level(Level l);
Level level();
bool enabled(Level l);
// Writes one line (use the macros: they skip the formatting when the level
// is off).
void write(Level l, std::string_view component, std::string_view message);
// Whether stderr is the journal (JOURNAL_STREAM matches stderr's dev:ino).
bool stderr_is_journal();

}  // namespace kvasir::log

#define KV_LOG_AT(lvl, component, ...)                                      \
  do {                                                                      \
    if (::kvasir::log::enabled(lvl))                                        \
      ::kvasir::log::write((lvl), (component), ::fmt::format(__VA_ARGS__)); \
  } while (0)
#define KV_LOG_TRACE(component, ...) KV_LOG_AT(::kvasir::log::Level::kTrace, component, __VA_ARGS__)
#define KV_LOG_DEBUG(component, ...) KV_LOG_AT(::kvasir::log::Level::kDebug, component, __VA_ARGS__)
#define KV_LOG_INFO(component, ...) KV_LOG_AT(::kvasir::log::Level::kInfo, component, __VA_ARGS__)
#define KV_LOG_WARN(component, ...) KV_LOG_AT(::kvasir::log::Level::kWarn, component, __VA_ARGS__)
#define KV_LOG_ERROR(component, ...) KV_LOG_AT(::kvasir::log::Level::kError, component, __VA_ARGS__)
