#include "base/log.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

namespace kvasir::log {
namespace {

spdlog::level::level_enum to_spd(Level l) {
  switch (l) {
    case Level::kTrace:
      return spdlog::level::trace;
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
    case Level::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

// "%*": the sd-daemon priority prefix ("<3>" error ... "<7>" debug).
class JournalPriority : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    int p = 6;
    switch (msg.level) {
      case spdlog::level::trace:
      case spdlog::level::debug:
        p = 7;
        break;
      case spdlog::level::info:
        p = 6;
        break;
      case spdlog::level::warn:
        p = 4;
        break;
      case spdlog::level::err:
        p = 3;
        break;
      case spdlog::level::critical:
        p = 2;
        break;
      default:
        break;
    }
    const char s[3] = {'<', char('0' + p), '>'};
    dest.append(s, s + 3);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JournalPriority>();
  }
};

// One letter per level, as glog and the kernel's printk do.
class LevelLetter : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    static const char kLetters[] = "TDIWEC ";
    const size_t i = size_t(msg.level) < sizeof kLetters - 1 ? size_t(msg.level) : 6;
    dest.push_back(kLetters[i]);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<LevelLetter>();
  }
};

struct State {
  std::mutex mu;
  std::shared_ptr<spdlog::logger> logger;
  std::atomic<int> level{int(Level::kInfo)};
};

State& state() {
  static State s;
  return s;
}

// spdlog's pattern takes '%' as its escape: a process name is literal text.
std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '%') out += '%';
    out += c;
  }
  return out;
}

std::shared_ptr<spdlog::logger> make_logger(const Options& opt) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("kvasir", sink);
  const bool journal = opt.journal < 0 ? stderr_is_journal() : opt.journal > 0;
  auto f = std::make_unique<spdlog::pattern_formatter>();
  f->add_flag<JournalPriority>('*').add_flag<LevelLetter>('L');
  f->set_pattern(journal ? "%*%v" : "%Y-%m-%d %H:%M:%S.%e %L " + escape(opt.process) + " %v");
  logger->set_formatter(std::move(f));
  logger->set_level(spdlog::level::trace);  // filtered by enabled()
  logger->flush_on(spdlog::level::trace);   // every line reaches the file at once
  return logger;
}

}  // namespace

std::optional<Level> parse_level(std::string_view name) {
  for (Level l :
       {Level::kTrace, Level::kDebug, Level::kInfo, Level::kWarn, Level::kError, Level::kOff})
    if (name == level_name(l)) return l;
  return std::nullopt;
}

const char* level_name(Level l) {
  switch (l) {
    case Level::kTrace:
      return "trace";
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
    case Level::kOff:
      return "off";
  }
  return "info";
}

bool stderr_is_journal() {
  const char* js = std::getenv("JOURNAL_STREAM");
  if (!js || !*js) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(js, "%llu:%llu", &dev, &ino) != 2) return false;
  struct stat st {};
  if (fstat(2, &st) != 0) return false;
  return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void init(const Options& opt) {
  State& s = state();
  auto logger = make_logger(opt);
  std::lock_guard lk(s.mu);
  s.logger = std::move(logger);
  s.level.store(int(opt.level));
}

void set_level(Level l) {
  state().level.store(int(l));
}

Level level() {
  return Level(state().level.load(std::memory_order_relaxed));
}

bool enabled(Level l) {
  return l != Level::kOff && int(l) >= state().level.load(std::memory_order_relaxed);
}

void write(Level l, std::string_view component, std::string_view message) {
  State& s = state();
  std::shared_ptr<spdlog::logger> logger;
  {
    std::lock_guard lk(s.mu);
    if (!s.logger) s.logger = make_logger(Options{});
    logger = s.logger;
  }
  if (component.empty())
    logger->log(to_spd(l), "{}", message);
  else
    logger->log(to_spd(l), "{}: {}", component, message);
}

}  // namespace kvasir::log
