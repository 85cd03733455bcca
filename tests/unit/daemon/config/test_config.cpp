// One test per config rule (daemon/config.h). Each refusal must name its field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/check.h"
#include "base/cores.h"
#include "base/cpu_list.h"
#include "daemon/config/config.h"
#include "tests/unit/daemon/config/refusal.h"

namespace kvasir {
namespace {

const char* kGood = R"(
[model]
path = "models/m.gguf"
[plan]
max_rows = 8
max_tokens = 64
max_inflight = 0
[[stages]]
layers = "0-14"
device = "cpu"
threads = 1
[[stages]]
layers = "15-29"
device = "cpu"
threads = 2
[kv]
block_size = 16
memory = "512MiB"
[server]
socket = "run/kvasir.sock"
)";

using test::refusal;

std::string replace(std::string s, const std::string& from, const std::string& to) {
  auto i = s.find(from);
  EXPECT_NE(i, std::string::npos) << from;
  return s.replace(i, from.size(), to);
}

ModelConfig model30() {
  ModelConfig m;
  m.n_layers = 30;
  m.hidden = 576;
  m.n_heads = 9;
  m.n_kv_heads = 3;
  m.head_dim = 64;
  return m;
}

std::string model_refusal(const std::string& text) {
  const ModelConfig m = model30();
  return refusal(text, &m);
}

TEST(Config, GoodFileParsesWithDefaultsAndResolvedPaths) {
  Config c = parse_config(kGood, "/base");
  EXPECT_EQ(c.model.path, "/base/models/m.gguf");
  EXPECT_EQ(c.server.socket, "/base/run/kvasir.sock");
  ASSERT_EQ(c.plan.stages.size(), 2u);
  EXPECT_EQ(c.plan.stages[1].first, 15);
  EXPECT_EQ(c.plan.stages[1].last, 29);
  EXPECT_EQ(c.plan.stages[1].threads, 2);
  // 0, or no key: every core this process may run on (shared by need).
  const Config all = parse_config(replace(kGood, "threads = 2", "threads = 0"), "/base");
  EXPECT_EQ(all.plan.stages[1].threads, available_cores());
  const Config dflt = parse_config(replace(kGood, "threads = 2\n", ""), "/base");
  EXPECT_EQ(dflt.plan.stages[1].threads, available_cores());
  EXPECT_EQ(c.kv.memory, 512ull << 20);
  EXPECT_EQ(c.kv.dtype, "f16");
  EXPECT_EQ(c.scheduler.policy, "continuous+chunked");
  EXPECT_EQ(c.scheduler.chunk_size, 512);
  EXPECT_EQ(c.scheduler.max_num_seqs, 256);
  EXPECT_EQ(c.scheduler.max_queue, 1024);
  EXPECT_EQ(c.server.max_body, 8ull << 20);
  EXPECT_EQ(c.server.drain_timeout, 30);
  EXPECT_EQ(model_refusal(kGood), "(accepted)");
}

TEST(Config, AbsolutePathsStay) {
  auto c = parse_config(replace(kGood, "models/m.gguf", "/abs/m.gguf"), "/base");
  EXPECT_EQ(c.model.path, "/abs/m.gguf");
}

TEST(Config, Sizes) {
  EXPECT_EQ(parse_size("512MiB", "f"), 512ull << 20);
  EXPECT_EQ(parse_size("8 MiB", "f"), 8ull << 20);
  EXPECT_EQ(parse_size("1GiB", "f"), 1ull << 30);
  EXPECT_EQ(parse_size("1.5KiB", "f"), 1536u);
  EXPECT_EQ(parse_size("4096", "f"), 4096u);
  EXPECT_EQ(parse_size("100MB", "f"), 100000000u);
  EXPECT_THROW(parse_size("12 parsecs", "f"), Error);
  EXPECT_THROW(parse_size("MiB", "f"), Error);
  EXPECT_THROW(parse_size("-1MiB", "f"), Error);
  EXPECT_NE(refusal(replace(kGood, "\"512MiB\"", "\"lots\"")).find("kv.memory"), std::string::npos);
}

TEST(Config, SingleStageRefusedHeadAndTailAreDistinctRoles) {
  std::string one =
      replace(kGood, "[[stages]]\nlayers = \"15-29\"\ndevice = \"cpu\"\nthreads = 2\n", "");
  one = replace(one, "\"0-14\"", "\"0-29\"");
  auto m = refusal(one);
  EXPECT_NE(m.find("stages:"), std::string::npos) << m;
  EXPECT_NE(m.find("head"), std::string::npos) << m;
  EXPECT_NE(m.find("distinct roles"), std::string::npos) << m;
}

TEST(Config, NoStagesRefused) {
  std::string none = kGood;
  none = none.substr(0, none.find("[[stages]]")) + none.substr(none.find("[kv]"));
  EXPECT_NE(refusal(none).find("distinct roles"), std::string::npos);
}

TEST(Config, OverlapRefused) {
  auto m = refusal(replace(kGood, "\"15-29\"", "\"10-29\""));
  EXPECT_NE(m.find("stages[1].layers"), std::string::npos) << m;
  EXPECT_NE(m.find("overlaps"), std::string::npos) << m;
}

TEST(Config, GapRefused) {
  auto m = refusal(replace(kGood, "\"15-29\"", "\"17-29\""));
  EXPECT_NE(m.find("stages[1].layers"), std::string::npos) << m;
  EXPECT_NE(m.find("15-16"), std::string::npos) << m;
}

TEST(Config, FirstStageMustStartAtZero) {
  auto m = refusal(replace(kGood, "\"0-14\"", "\"2-14\""));
  EXPECT_NE(m.find("stages[0].layers"), std::string::npos) << m;
}

TEST(Config, BackwardsRangeRefused) {
  auto m = refusal(replace(kGood, "\"15-29\"", "\"29-15\""));
  EXPECT_NE(m.find("stages[1].layers"), std::string::npos) << m;
}

TEST(Config, MalformedRangeRefused) {
  auto m = refusal(replace(kGood, "\"15-29\"", "\"fifteen\""));
  EXPECT_NE(m.find("stages[1].layers"), std::string::npos) << m;
}

TEST(Config, PastTheModelRefused) {
  auto m = model_refusal(replace(kGood, "\"15-29\"", "\"15-40\""));
  EXPECT_NE(m.find("stages[1].layers"), std::string::npos) << m;
  EXPECT_NE(m.find("goes past"), std::string::npos) << m;
}

TEST(Config, ShortOfTheModelRefused) {
  auto m = model_refusal(replace(kGood, "\"15-29\"", "\"15-25\""));
  EXPECT_NE(m.find("stages[1].layers"), std::string::npos) << m;
  EXPECT_NE(m.find("26-29"), std::string::npos) << m;
}

TEST(Config, GpuNamedTwiceRefused) {
  std::string t =
      replace(kGood, "device = \"cpu\"\nthreads = 1", "device = \"cuda:0\"\nthreads = 1");
  t = replace(t, "device = \"cpu\"\nthreads = 2", "device = \"cuda:0\"\nthreads = 2");
  auto m = refusal(t);
  EXPECT_NE(m.find("stages[1].device"), std::string::npos) << m;
  EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
}

TEST(Config, BadDeviceRefused) {
  auto m =
      refusal(replace(kGood, "device = \"cpu\"\nthreads = 2", "device = \"tpu:0\"\nthreads = 2"));
  EXPECT_NE(m.find("stages[1].device"), std::string::npos) << m;
}

TEST(Config, ZeroWidthsRefused) {
  for (auto key : {"max_rows", "max_tokens"}) {
    auto t = std::string(kGood);
    auto line = std::string(key) + " = ";
    auto i = t.find(line);
    t.replace(i, t.find('\n', i) - i, line + "0");
    auto m = refusal(t);
    EXPECT_NE(m.find(std::string("plan.") + key), std::string::npos) << m;
  }
  auto m = refusal(replace(kGood, "threads = 2", "threads = -1"));
  EXPECT_NE(m.find("stages[1].threads"), std::string::npos) << m;
  m = refusal(replace(kGood, "threads = 2", "threads = 1025"));
  EXPECT_NE(m.find("stages[1].threads"), std::string::npos) << m;
  m = refusal(replace(kGood, "block_size = 16", "block_size = 0"));
  EXPECT_NE(m.find("kv.block_size"), std::string::npos) << m;
  m = refusal(replace(kGood, "\"512MiB\"", "\"0MiB\""));
  EXPECT_NE(m.find("kv.memory"), std::string::npos) << m;
}

TEST(Config, RowsMustFitTokenBudget) {
  auto m = refusal(replace(kGood, "max_rows = 8", "max_rows = 100"));
  EXPECT_NE(m.find("plan.max_rows"), std::string::npos) << m;
}

TEST(Config, NegativeInflightRefused) {
  auto m = refusal(replace(kGood, "max_inflight = 0", "max_inflight = -1"));
  EXPECT_NE(m.find("plan.max_inflight"), std::string::npos) << m;
  auto c = parse_config(replace(kGood, "max_inflight = 0", "max_inflight = 1"), "/b");
  EXPECT_EQ(c.plan.inflight(), 1);
}

TEST(Config, InflightDefaultsToTheStagesThatComputeAtOnce) {
  // Stages sharing the cores by need (threads 0: all of them each) take
  // turns on them: one micro-batch, all the decodes in it.
  const Config shared = parse_config(
      replace(replace(kGood, "threads = 1", "threads = 0"), "threads = 2", "threads = 0"), "/b");
  EXPECT_EQ(shared.plan.inflight(), 1);
  // Each with cores of its own: one micro-batch per stage.
  if (available_cores() >= 2) {
    const Config own = parse_config(replace(kGood, "threads = 2", "threads = 1"), "/b");
    EXPECT_EQ(own.plan.inflight(), 2);
  }
  // Written, it is kept, shared cores or not.
  const Config two = parse_config(
      replace(replace(kGood, "threads = 1", "threads = 0"), "max_inflight = 0", "max_inflight = 2"),
      "/b");
  EXPECT_EQ(two.plan.inflight(), 2);
}

TEST(Config, SpinUsDefaultsAndRange) {
  EXPECT_EQ(parse_config(kGood, "/b").plan.spin_us, PlanCfg::kDefaultSpinUs);
  auto c = parse_config(replace(kGood, "max_inflight = 0", "max_inflight = 0\nspin_us = 0"), "/b");
  EXPECT_EQ(c.plan.spin_us, 0);  // sleep at once, as before the spin
  c = parse_config(replace(kGood, "max_inflight = 0", "max_inflight = 0\nspin_us = 500"), "/b");
  EXPECT_EQ(c.plan.spin_us, 500);
  for (const char* bad : {"spin_us = -1", "spin_us = 10001", "spin_us = \"fast\""}) {
    auto m = refusal(replace(kGood, "max_inflight = 0", std::string("max_inflight = 0\n") + bad));
    EXPECT_EQ(m.rfind("plan.spin_us", 0), 0u) << bad << " -> " << m;
  }
}

TEST(Config, StageCpusCheckedAgainstTheMachine) {
  const std::vector<int> mine = allowed_cpus();
  ASSERT_FALSE(mine.empty());
  const std::string first = std::to_string(mine.front());
  auto c = parse_config(replace(kGood, "threads = 2", "threads = 2\ncpus = \"" + first + "\""), "/b");
  EXPECT_EQ(c.plan.stages[0].cpus, "");  // unpinned unless written
  EXPECT_EQ(c.plan.stages[1].cpus, first);
  c = parse_config(replace(kGood, "threads = 2", "threads = 2\ncpus = \" " + first + "," + first + "\""), "/b");
  EXPECT_EQ(c.plan.stages[1].cpus, first);  // written the shortest way
  for (const char* bad : {"\"0-\"", "\"\"", "\"a-b\"", "\"3-1\"", "7", "\"8191\""}) {
    auto m = refusal(replace(kGood, "threads = 2", std::string("threads = 2\ncpus = ") + bad));
    EXPECT_EQ(m.rfind("stages[1].cpus: ", 0), 0u) << bad << " -> " << m;
  }
  // A CPU the machine has not (or the daemon may not use) is named.
  auto m = refusal(replace(kGood, "threads = 2", "threads = 2\ncpus = \"8000\""));
  EXPECT_NE(m.find("CPU 8000"), std::string::npos) << m;
}

TEST(Config, KvMemoryTooSmallForOneBlockRefused) {
  auto m = model_refusal(replace(kGood, "\"512MiB\"", "\"1KiB\""));
  EXPECT_NE(m.find("kv.memory"), std::string::npos) << m;
}

TEST(Config, UnknownKeyRefused) {
  auto m = refusal(replace(kGood, "max_rows = 8", "max_row = 8"));
  EXPECT_NE(m.find("plan.max_row"), std::string::npos) << m;
  m = refusal(replace(kGood, "threads = 2", "threads = 2\nthread = 1"));
  EXPECT_NE(m.find("stages[1].thread"), std::string::npos) << m;
}

TEST(Config, WrongTypeRefused) {
  auto m = refusal(replace(kGood, "max_rows = 8", "max_rows = \"8\""));
  EXPECT_NE(m.find("plan.max_rows"), std::string::npos) << m;
}

TEST(Config, SyntaxErrorNamesLine) {
  auto m = refusal("[model\npath = 1");
  EXPECT_NE(m.find("<string>:1"), std::string::npos) << m;
}

TEST(Config, MissingModelPathRefused) {
  auto m = refusal("[plan]\nmax_rows = 1\n");
  EXPECT_NE(m.find("model"), std::string::npos) << m;
}

TEST(Config, UnknownPolicyRefused) {
  auto m = refusal(std::string(kGood) + "[scheduler]\npolicy = \"lottery\"\n");
  EXPECT_NE(m.find("scheduler.policy"), std::string::npos) << m;
}

TEST(Config, MaxQueueZeroRefused) {
  // Every request passes through the queue: 0 would refuse them all.
  auto m = refusal(std::string(kGood) + "[scheduler]\nmax_queue = 0\n");
  EXPECT_NE(m.find("scheduler.max_queue: 0 is out of range [1,"), std::string::npos) << m;
  Config c = parse_config(std::string(kGood) + "[scheduler]\nmax_queue = 1\n", "/b");
  EXPECT_EQ(c.scheduler.max_queue, 1);
}

TEST(Config, EveryPolicyNameAccepted) {
  for (const char* p : {"naive", "static", "continuous", "continuous+chunked"}) {
    Config c = parse_config(std::string(kGood) + "[scheduler]\npolicy = \"" + p + "\"\n", "/b");
    EXPECT_EQ(c.scheduler.policy, p);
  }
}

TEST(Config, PrefixCachingOnByDefaultOffUnderStaticRefusedWhenAsked) {
  EXPECT_TRUE(parse_config(kGood, "/b").kv.prefix_caching);
  Config off = parse_config(replace(kGood, "[kv]\n", "[kv]\nprefix_caching = false\n"), "/b");
  EXPECT_FALSE(off.kv.prefix_caching);
  // `static` models a padded batcher: off by default there...
  Config st = parse_config(std::string(kGood) + "[scheduler]\npolicy = \"static\"\n", "/b");
  EXPECT_FALSE(st.kv.prefix_caching);
  // ...and refused when asked for, naming both keys.
  auto m = refusal(replace(kGood, "[kv]\n", "[kv]\nprefix_caching = true\n") +
                   "[scheduler]\npolicy = \"static\"\n");
  EXPECT_NE(m.find("kv.prefix_caching: not with scheduler.policy = \"static\""), std::string::npos)
      << m;
  m = refusal(replace(kGood, "[kv]\n", "[kv]\nprefix_caching = 1\n"));
  EXPECT_NE(m.find("kv.prefix_caching: must be true or false"), std::string::npos) << m;
}

TEST(Config, ServerKeys) {
  auto c = parse_config(std::string(kGood).replace(std::string(kGood).find("[server]"), 8,
                                                   "[server]\nhttp = \"127.0.0.1:8000\"\n"
                                                   "max_body = \"1MiB\"\ndrain_timeout = 5\n"),
                        "/b");
  EXPECT_EQ(c.server.http, "127.0.0.1:8000");
  EXPECT_EQ(c.server.max_body, 1u << 20);
  EXPECT_EQ(c.server.drain_timeout, 5);
  auto m = refusal(replace(kGood, "[server]", "[server]\nhttp = \"8000\""));
  EXPECT_NE(m.find("server.http"), std::string::npos) << m;
}

// server.served_model_name: one name or a list; refused when empty, too
// many, duplicated, or holding a control byte.
TEST(Config, ServedModelName) {
  EXPECT_TRUE(parse_config(kGood, "/b").server.served_model_name.empty());
  auto c = parse_config(replace(kGood, "[server]", "[server]\nserved_model_name = \"smol\""), "/b");
  EXPECT_EQ(c.server.served_model_name, std::vector<std::string>{"smol"});
  c = parse_config(
      replace(kGood, "[server]", "[server]\nserved_model_name = [\"smol\", \"gpt-4o mini\"]"), "/b");
  EXPECT_EQ(c.server.served_model_name, (std::vector<std::string>{"smol", "gpt-4o mini"}));
  for (const char* bad : {"served_model_name = []", "served_model_name = \"\"",
                          "served_model_name = 5", "served_model_name = [\"a\", 1]",
                          "served_model_name = [\"a\", \"a\"]", "served_model_name = \"a\\tb\""}) {
    auto m = refusal(replace(kGood, "[server]", std::string("[server]\n") + bad));
    EXPECT_NE(m.find("server.served_model_name"), std::string::npos) << bad << ": " << m;
  }
}

TEST(Config, ReadTimeoutAndMaxConnections) {
  auto c = parse_config(kGood, "/b");
  EXPECT_EQ(c.server.read_timeout, 30);
  EXPECT_EQ(c.server.max_connections, 256);
  c = parse_config(replace(kGood, "[server]", "[server]\nread_timeout = 2.5\nmax_connections = 8"),
                   "/b");
  EXPECT_EQ(c.server.read_timeout, 2.5);
  EXPECT_EQ(c.server.max_connections, 8);
  for (const char* bad :
       {"read_timeout = 0", "read_timeout = -1", "read_timeout = \"5\"", "read_timeout = nan"}) {
    auto m = refusal(replace(kGood, "[server]", std::string("[server]\n") + bad));
    EXPECT_NE(m.find("server.read_timeout"), std::string::npos) << bad << ": " << m;
  }
  for (const char* bad : {"max_connections = 0", "max_connections = 100000"}) {
    auto m = refusal(replace(kGood, "[server]", std::string("[server]\n") + bad));
    EXPECT_NE(m.find("server.max_connections"), std::string::npos) << bad << ": " << m;
  }
}

// server.api_key_file: read at load, trailing newline stripped; refused when
// unreadable, empty, readable by others, or set together with api_key.
TEST(Config, ApiKeyFile) {
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path() / ("kvcfg-key-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text, fs::perms mode) {
    auto p = dir / name;
    std::ofstream(p) << text;
    fs::permissions(p, mode);
    return p;
  };
  auto with_file = [&](const std::string& file) {
    return replace(kGood, "[server]", "[server]\napi_key_file = \"" + file + "\"");
  };
  const auto rw = fs::perms::owner_read | fs::perms::owner_write;
  write("good", "s3cret-key\n", rw);
  auto c = parse_config(with_file("good"), dir.string());  // relative to the config's folder
  EXPECT_EQ(c.server.api_key, "s3cret-key");
  EXPECT_EQ(c.server.api_key_file, (dir / "good").string());
  write("crlf", "k2\r\n", rw | fs::perms::group_read);
  EXPECT_EQ(parse_config(with_file("crlf"), dir.string()).server.api_key, "k2");

  auto refused = [&](const std::string& text, const std::string& want) {
    std::string m;
    try {
      parse_config(text, dir.string());
      m = "(accepted)";
    } catch (const Error& e) {
      m = e.message();
    }
    EXPECT_EQ(m.rfind("server.api_key_file", 0), 0u) << m;
    EXPECT_NE(m.find(want), std::string::npos) << m;
  };
  refused(with_file("missing"), "No such file");
  write("world", "k\n", rw | fs::perms::others_read);
  refused(with_file("world"), "other users");
  write("empty", "\n", rw);
  refused(with_file("empty"), "empty");
  write("two", "a b\n", rw);
  refused(with_file("two"), "one line");
  write("big", std::string(5000, 'k'), rw);
  refused(with_file("big"), "bytes");
  refused(replace(with_file("good"), "[server]", "[server]\napi_key = \"x\""), "api_key");
  fs::create_directories(dir / "adir");
  refused(with_file("adir"), "not a regular file");
  fs::remove_all(dir);
}

// [recovery]: defaults as docs/recovery.md states them; every key read; each
// range and type refused naming its key.
TEST(Config, RecoveryKeys) {
  auto c = parse_config(kGood, "/b");
  EXPECT_EQ(c.recovery.watchdog_k, 10);
  EXPECT_EQ(c.recovery.watchdog_floor_s, 10);
  EXPECT_EQ(c.recovery.watchdog_busy_cap_s, 600);
  EXPECT_EQ(c.recovery.backoff_s, 0.05);
  EXPECT_EQ(c.recovery.backoff_max_s, 5);
  EXPECT_EQ(c.recovery.max_restarts, 5);
  EXPECT_EQ(c.recovery.restart_window_s, 60);
  c = parse_config(std::string(kGood) +
                       "[recovery]\nwatchdog_k = 4\nwatchdog_floor_s = 0.5\n"
                       "watchdog_busy_cap_s = 0\nbackoff_s = 0\nbackoff_max_s = 2.5\n"
                       "max_restarts = 0\nrestart_window_s = 300\n",
                   "/b");
  EXPECT_EQ(c.recovery.watchdog_k, 4);
  EXPECT_EQ(c.recovery.watchdog_floor_s, 0.5);
  EXPECT_EQ(c.recovery.watchdog_busy_cap_s, 0);
  EXPECT_EQ(c.recovery.backoff_s, 0);
  EXPECT_EQ(c.recovery.backoff_max_s, 2.5);
  EXPECT_EQ(c.recovery.max_restarts, 0);
  EXPECT_EQ(c.recovery.restart_window_s, 300);
  struct Bad {
    const char* line;
    const char* want;
  };
  for (auto [line, want] : std::initializer_list<Bad>{
           {"watchdog_k = 0.5", "recovery.watchdog_k: 0.5 is out of range"},
           {"watchdog_k = \"10\"", "recovery.watchdog_k: must be a number"},
           {"watchdog_k = true", "recovery.watchdog_k: must be a number"},
           {"watchdog_floor_s = -1", "recovery.watchdog_floor_s: -1 is out of range"},
           {"watchdog_floor_s = nan", "recovery.watchdog_floor_s"},
           {"watchdog_floor_s = inf", "recovery.watchdog_floor_s"},
           {"watchdog_busy_cap_s = 100000", "recovery.watchdog_busy_cap_s"},
           {"backoff_s = -0.1", "recovery.backoff_s"},
           {"backoff_s = 3601", "recovery.backoff_s"},
           {"backoff_s = 2\nbackoff_max_s = 1", "recovery.backoff_max_s: 1 is below"},
           {"max_restarts = -1", "recovery.max_restarts: -1 is out of range [0, 1000]"},
           {"max_restarts = 1.5", "recovery.max_restarts: must be an integer"},
           {"restart_window_s = 0", "recovery.restart_window_s"},
           {"max_restart = 3", "recovery.max_restart: unknown key"},
       }) {
    auto m = refusal(std::string(kGood) + "[recovery]\n" + line + "\n");
    EXPECT_EQ(m.rfind(want, 0), 0u) << line << ": " << m;
  }
  auto m = refusal("recovery = 3\n" + std::string(kGood));  // a root key, before any table
  EXPECT_NE(m.find("recovery: must be a table"), std::string::npos) << m;
}

// [grammar]: defaults as docs/config.md states them; every key read; each
// range and type refused naming its key.
TEST(Config, GrammarKeys) {
  auto c = parse_config(kGood, "/b");
  EXPECT_TRUE(c.grammar.enabled);
  EXPECT_EQ(c.grammar.workers, 2);
  EXPECT_EQ(c.grammar.cache_capacity, 128);
  EXPECT_EQ(c.grammar.compile_timeout_s, 10);
  EXPECT_EQ(c.grammar.max_spec_bytes, 64u << 10);
  EXPECT_EQ(grammar_entry_capacity(c.grammar), (64u << 10) + 8192);
  c = parse_config(std::string(kGood) +
                       "[grammar]\nenabled = false\nworkers = 4\ncache_capacity = 0\n"
                       "compile_timeout = 2.5\nmax_spec_bytes = \"1MiB\"\n",
                   "/b");
  EXPECT_FALSE(c.grammar.enabled);
  EXPECT_EQ(c.grammar.workers, 4);
  EXPECT_EQ(c.grammar.cache_capacity, 0);
  EXPECT_EQ(c.grammar.compile_timeout_s, 2.5);
  EXPECT_EQ(c.grammar.max_spec_bytes, 1u << 20);
  struct Bad {
    const char* line;
    const char* want;
  };
  for (auto [line, want] : std::initializer_list<Bad>{
           {"enabled = 1", "grammar.enabled: must be true or false"},
           {"workers = 0", "grammar.workers: 0 is out of range"},
           {"cache_capacity = -1", "grammar.cache_capacity: -1 is out of range"},
           {"compile_timeout = 0", "grammar.compile_timeout: 0 is out of range"},
           {"max_spec_bytes = 10", "grammar.max_spec_bytes: 10 is out of range"},
           {"max_spec_bytes = \"1GiB\"", "grammar.max_spec_bytes"},
           {"worker = 3", "grammar.worker: unknown key"},
       }) {
    auto m = refusal(std::string(kGood) + "[grammar]\n" + line + "\n");
    EXPECT_EQ(m.rfind(want, 0), 0u) << line << ": " << m;
  }
}

TEST(Config, LoadFileResolvesAgainstItsFolderAndMissingFileNamed) {
  auto dir = std::filesystem::temp_directory_path() / ("kvcfg-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto file = dir / "k.toml";
  std::ofstream(file) << kGood;
  auto c = load_config(file.string());
  EXPECT_EQ(c.model.path, (dir / "models/m.gguf").string());
  std::filesystem::remove_all(dir);
  try {
    load_config((dir / "nope.toml").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("nope.toml"), std::string::npos);
  }
}

TEST(Config, LogLevelAndBatchLog) {
  const Config c = parse_config(kGood, "/base");
  EXPECT_EQ(c.log.level, "info");
  EXPECT_EQ(c.log.batches, "");  // none unless asked
  const Config rel =
      parse_config(std::string(kGood) + "[log]\nbatches = \"run/b.jsonl\"\n", "/base");
  EXPECT_EQ(rel.log.batches, "/base/run/b.jsonl");  // the config's folder, as every path
  const Config abs =
      parse_config(std::string(kGood) + "[log]\nbatches = \"/tmp/b.jsonl\"\n", "/base");
  EXPECT_EQ(abs.log.batches, "/tmp/b.jsonl");
  EXPECT_EQ(refusal(std::string(kGood) + "[log]\nbatches = 3\n"), "log.batches: must be a string");
  EXPECT_NE(refusal(std::string(kGood) + "[log]\nlevel = \"loud\"\n").find("log.level"),
            std::string::npos);
}

TEST(Config, SpeculativeMethodsAndTheirLimits) {
  const Config d = parse_config(kGood, "/b");
  EXPECT_EQ(d.speculative.method, "none");
  EXPECT_EQ(d.speculative.suffix_max_depth, 24);
  EXPECT_DOUBLE_EQ(d.speculative.suffix_min_prob, 0.1);
  EXPECT_EQ(d.speculative.suffix_cache_requests, 256);
  const Config c = parse_config(
      std::string(kGood) + "[speculative]\nmethod = \"suffix\"\nmax_draft = 8\nsuffix_max_depth = 32\n"
              "suffix_min_prob = 0.25\nsuffix_cache_requests = 0\n",
      "/b");
  EXPECT_EQ(c.speculative.method, "suffix");
  EXPECT_EQ(c.speculative.max_draft, 8);
  EXPECT_EQ(c.speculative.suffix_max_depth, 32);
  EXPECT_DOUBLE_EQ(c.speculative.suffix_min_prob, 0.25);
  EXPECT_EQ(c.speculative.suffix_cache_requests, 0);
  const std::string spec = std::string(kGood) + "[speculative]\n";
  EXPECT_NE(refusal(spec + "method = \"eagle\"\n").find("not one of none, ngram, suffix"),
            std::string::npos);
  EXPECT_NE(refusal(spec + "suffix_max_depth = 1\n").find("speculative.suffix_max_depth"),
            std::string::npos);
  EXPECT_NE(refusal(spec + "suffix_min_prob = 0.0\n").find("speculative.suffix_min_prob"),
            std::string::npos);
  EXPECT_NE(refusal(spec + "suffix_min_prob = 1.5\n").find("speculative.suffix_min_prob"),
            std::string::npos);
  EXPECT_NE(refusal(spec + "suffix_cache_requests = -1\n").find("speculative.suffix_cache"),
            std::string::npos);
  EXPECT_NE(refusal(spec + "suffix_depth = 3\n").find("suffix_depth"), std::string::npos);
}

}  // namespace
}  // namespace kvasir

namespace kvasir {
namespace {

// layers = "auto": every stage or none; the ranges come at load
// (apply_split), and then the plan rules apply as to written ones.
TEST(Config, AutoLayersForEveryStageOrNone) {
  const std::string two = R"([model]
path = "/m.gguf"
[[stages]]
layers = "auto"
[[stages]]
layers = "auto"
)";
  Config c = parse_config(two, "/base");
  EXPECT_TRUE(c.plan.auto_layers);
  EXPECT_EQ(c.plan.stages[0].first, -1);
  ModelConfig m;
  m.n_layers = 30;
  try {
    check_against_model(c, m);
    ADD_FAILURE() << "an unresolved auto split passed the model check";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("auto"), std::string::npos) << e.message();
  }
  apply_split(c.plan, {{0, 17}, {18, 29}});
  EXPECT_FALSE(c.plan.auto_layers);
  EXPECT_EQ(c.plan.stages[1].first, 18);
  try {
    parse_config(R"([model]
path = "/m.gguf"
[[stages]]
layers = "auto"
[[stages]]
layers = "15-29"
)",
                 "/base");
    ADD_FAILURE() << "a half-auto plan was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("stages[1].layers"), std::string::npos) << e.message();
  }
  try {
    apply_split(c.plan, {{0, 10}, {12, 29}});
    ADD_FAILURE() << "a split with a gap was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("stages[1].layers"), std::string::npos) << e.message();
  }
}

TEST(Config, ItlTargetIsAutoMillisecondsOrNone) {
  const std::string base =
      "[model]\npath = \"/m.gguf\"\n[[stages]]\nlayers = \"0-14\"\n"
      "[[stages]]\nlayers = \"15-29\"\n";
  EXPECT_EQ(parse_config(base, "/b").scheduler.itl_target_ms,
            SchedulerCfg::kItlAuto);  // the default
  EXPECT_EQ(parse_config(base + "[scheduler]\nitl_target_ms = 250\n", "/b").scheduler.itl_target_ms,
            250);
  EXPECT_EQ(parse_config(base + "[scheduler]\nitl_target_ms = 0\n", "/b").scheduler.itl_target_ms,
            0);
  EXPECT_EQ(
      parse_config(base + "[scheduler]\nitl_target_ms = \"auto\"\n", "/b").scheduler.itl_target_ms,
      SchedulerCfg::kItlAuto);
  for (const char* bad : {"-5", "\"fast\"", "1e9"}) {
    try {
      parse_config(base + "[scheduler]\nitl_target_ms = " + bad + "\n", "/b");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("scheduler.itl_target_ms"), std::string::npos) << e.message();
    }
  }
}

TEST(Config, ParallelStagesCountCoresOfTheirOwn) {
  auto plan = [](std::vector<std::pair<std::string, int>> st) {
    PlanCfg p;
    for (auto& [dev, threads] : st) {
      StageCfg s;
      s.device = dev;
      s.threads = threads;
      p.stages.push_back(s);
    }
    return p;
  };
  // threads = 0 resolves to every core: two CPU stages share them.
  EXPECT_EQ(parallel_stages(plan({{"cpu", 2}, {"cpu", 2}}), 2), 1);
  EXPECT_EQ(parallel_stages(plan({{"cpu", 1}, {"cpu", 1}}), 2), 2);
  EXPECT_EQ(parallel_stages(plan({{"cpu", 1}, {"cpu", 1}, {"cpu", 1}}), 2), 1);
  EXPECT_EQ(parallel_stages(plan({{"cuda:0", 1}, {"cuda:1", 1}, {"cpu", 16}}), 16), 3);
  EXPECT_EQ(parallel_stages(plan({{"cuda:0", 1}, {"cpu", 8}, {"cpu", 8}}), 8), 2);
}

TEST(Config, WarmupIsOnUnlessTurnedOff) {
  const std::string base =
      "[model]\npath = \"/m.gguf\"\n[[stages]]\nlayers = \"0-14\"\n"
      "[[stages]]\nlayers = \"15-29\"\n";
  EXPECT_TRUE(parse_config(base, "/b").scheduler.warmup);
  EXPECT_FALSE(parse_config(base + "[scheduler]\nwarmup = false\n", "/b").scheduler.warmup);
  try {
    parse_config(base + "[scheduler]\nwarmup = 1\n", "/b");
    ADD_FAILURE() << "warmup = 1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("scheduler.warmup: must be true or false"), std::string::npos)
        << e.message();
  }
}

TEST(Config, SpeculativeAdaptiveKeys) {
  const std::string base =
      "[model]\npath = \"/m.gguf\"\n[[stages]]\nlayers = \"0-14\"\n"
      "[[stages]]\nlayers = \"15-29\"\n[speculative]\nmethod = \"ngram\"\n";
  const Config c = parse_config(base, "/b");
  EXPECT_TRUE(c.speculative.adaptive);
  EXPECT_EQ(c.speculative.probe_interval, 16);
  EXPECT_TRUE(c.speculative.grammar_forced);
  EXPECT_DOUBLE_EQ(c.speculative.max_step_growth, 0);
  const Config d = parse_config(
      base + "adaptive = false\nprobe_interval = 4\ngrammar_forced = false\nmax_step_growth = 0.25\n",
      "/b");
  EXPECT_DOUBLE_EQ(d.speculative.max_step_growth, 0.25);
  EXPECT_FALSE(d.speculative.adaptive);
  EXPECT_EQ(d.speculative.probe_interval, 4);
  EXPECT_FALSE(d.speculative.grammar_forced);
  auto refused = [&](const std::string& extra, const std::string& why) {
    try {
      parse_config(base + extra, "/b");
      ADD_FAILURE() << extra << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find(why), std::string::npos) << e.message();
    }
  };
  refused("adaptive = \"yes\"\n", "speculative.adaptive: must be true or false");
  refused("probe_interval = 0\n", "speculative.probe_interval");
  refused("probe_interval = 5000\n", "speculative.probe_interval");
  refused("grammar_forced = 1\n", "speculative.grammar_forced: must be true or false");
  refused("max_step_growth = -0.1\n", "speculative.max_step_growth: -0.1 is out of range");
  refused("max_step_growth = 17\n", "speculative.max_step_growth: 17 is out of range");
  refused("max_step_growth = \"5%\"\n", "speculative.max_step_growth: must be a number");
}

}  // namespace
}  // namespace kvasir
