// daemon/config/config.h — the daemon's configuration file (TOML) and the plan it holds.
//
// One file says everything kvasird needs: the model, the plan (stages with
// their layer ranges and devices, the micro-batch widths), the KV cache, the
// scheduler and the server. docs/config.md documents every key.
//
// Loading is two steps, so each rule can be tested on its own:
//   1. load_config / parse_config: syntax, types, ranges, plan shape
//      (every rule that needs no model), relative paths resolved against
//      the config file's folder;
//   2. check_against_model: layer ranges against the model's layer count,
//      and that the KV memory holds at least one block on every stage.
// Every refusal is a kvasir::Error whose message starts with the field,
// e.g. "stages[1].layers: 15-40 goes past the model's last layer 29".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/config.h"

namespace kvasir {

struct ModelCfg {
  std::string path;  // absolute after loading
};

struct StageCfg {
  int32_t first = 0;           // inclusive
  int32_t last = 0;            // inclusive
  std::string device = "cpu";  // "cpu" or "cuda:N"
  int32_t threads = 1;
  int32_t entry = -1;  // its [[stages]] entry, for messages (-1: built in code: the position)
  // An expert group (docs/expert-groups.md): the experts this process holds
  // of its layers, inclusive; -1 = all of them (not in a group). On a ring
  // position, `members` are the other processes of its group (its leader
  // holds the lowest range), each a StageCfg of the same layers with its
  // own range and no members.
  int32_t experts_first = -1, experts_last = -1;
  std::vector<StageCfg> members;
  // The CPUs this process runs on (`cpus`, checked against the daemon's own
  // when the config is read; base/cpu_list.h), written as the shortest
  // list; "" = wherever the daemon may run. Each entry its own: a group's
  // members too.
  std::string cpus;
  // "" = this host. Else the worker that runs this stage, as `kvasird
  // --worker --listen` has it: "ADDR:PORT" (docs/multi-host.md).
  std::string host;

  bool is_gpu() const { return device.rfind("cuda:", 0) == 0; }
  bool is_group() const { return experts_first >= 0; }
};

// The most processes of a group (leader + members), and of a plan (every
// position and every member: each has a slot in the segment, ipc's
// kMaxStages — daemon/supervisor checks the two agree).
constexpr int32_t kMaxGroupProcesses = 8;
constexpr int32_t kMaxPlanProcesses = 16;

// A run of consecutive stages that name one worker (`host`): stages
// first..end-1, one worker session (docs/multi-host.md, "The leader").
struct RemoteRun {
  int32_t first = 0, end = 0;
  std::string host;
};

struct PlanCfg {
  int32_t max_rows = 32;     // sequences per micro-batch
  int32_t max_tokens = 512;  // token budget of one micro-batch
  int32_t max_inflight = 0;  // as written; 0 = inflight()'s default
  // How long a stage (and the bridge) spins for the next hand-off before it
  // sleeps (ipc/futex.h, WaitPolicy), microseconds; 0 = sleep at once.
  static constexpr int32_t kDefaultSpinUs = 0;
  static constexpr int32_t kMaxSpinUs = 10000;
  int32_t spin_us = kDefaultSpinUs;
  std::vector<StageCfg> stages;
  // Every stage said layers = "auto": the ranges are chosen at load from
  // the layers' measured costs (apply_split); until then they are -1.
  bool auto_layers = false;

  // The effective number of micro-batches in the ring: max_inflight, or
  // by default one per stage that can compute at the same time
  // (parallel_stages on the cores this process may use): CPU stages that
  // share the cores by need get one micro-batch, since a second would only
  // split the running decodes between them (docs/ring.md, "Cores shared by
  // need").
  int32_t inflight() const;
  // The first stage that runs on a worker (`host`), -1 when all are local.
  int32_t first_remote() const {
    for (size_t i = 0; i < stages.size(); ++i)
      if (!stages[i].host.empty()) return int32_t(i);
    return -1;
  }
  // The maximal runs of consecutive stages naming the same host, in ring
  // order (none when all are local).
  std::vector<RemoteRun> remote_runs() const;
  // Every process of the plan: the positions and their groups' members.
  int32_t processes() const {
    size_t n = stages.size();
    for (const StageCfg& s : stages) n += s.members.size();
    return int32_t(n);
  }
};

// The ring positions of a plan from its [[stages]] entries, as written:
// consecutive entries with the same layers and an `experts` range form one
// position (the first, its leader, holds the others as members); every
// other entry is a position of its own. Refuses (a config error naming the
// entry) a lone `experts` entry, `experts` with layers = "auto", ranges that
// are not ascending from 0 without gap or overlap, a group of more than
// kMaxGroupProcesses, a GPU in a group, a plan of more than
// kMaxPlanProcesses processes. That the ranges end at the model's last
// expert is check_against_model's.
std::vector<StageCfg> form_groups(std::vector<StageCfg> entries);

// Stages of the plan that compute at the same time (the scheduler's
// pipeline fill, daemon/engine/policy.h SchedLimits::parallel_stages):
// each GPU stage; the CPU stages each when their threads fit the `cores`
// together, else all of them as one (they share the cores by need,
// stages/core_share.h: threads = 0, the default, gives each every core).
int32_t parallel_stages(const PlanCfg& plan, int cores);

struct KvCfg {
  int32_t block_size = 16;         // tokens per block
  uint64_t memory = 512ull << 20;  // bytes per CPU stage
  std::string dtype = "f16";       // "f16" or "f32"
  // GPU stages: the share of the device's free memory (after the weights are
  // up) their KV blocks may take, as vLLM's gpu_memory_utilization; (0, 1].
  double gpu_memory_utilization = 0.9;
  // Automatic prefix caching (docs/scheduler.md): full blocks of equal
  // token prefixes are computed once and shared. On by default, off under
  // scheduler.policy = "static" (refused there when set to true).
  bool prefix_caching = true;
  bool prefix_caching_set = false;  // written in the file (not the default)
};

// [cuda]: GPU stages only (docs/cuda.md, docs/config.md).
struct CudaCfg {
  // Decode-only micro-batches replayed as CUDA graphs, one per batch-shape
  // bucket (rows padded up to the bucket); prefill and mixed batches run
  // eagerly either way. false: every batch eagerly. Off by default until
  // the graph path has run on a GPU (docs/cuda.md, "Written, not run").
  bool graphs = false;
  // "none": weights as stored (bf16 on the GPU, FP8 checkpoints as FP8);
  // "fp8": a GPU stage quantises its layers' matrices to FP8 E4M3 at load,
  // one scale per output row (compute capability 8.9+).
  std::string quantize = "none";
};

struct SchedulerCfg {
  std::string policy = "continuous+chunked";  // naive | static | continuous | continuous+chunked
  int32_t chunk_size = 512;    // prefill chunk (tokens), for prompts longer than a micro-batch
  int32_t max_num_seqs = 256;  // sequences running at once
  int32_t max_queue = 1024;    // waiting requests before new ones are refused
  // The target gap between a running request's tokens (ms), under
  // continuous+chunked: > 0 a fixed target, 0 none (token budget only),
  // kItlAuto ("auto", the default) from the stages' measured costs: without
  // a target a 512-token chunk gave decodes gaps of seconds on a CPU (p99
  // 0.87-1.04x continuous's); auto held them to 0.09-0.37x
  // (docs/measurements/2026-12-01.md, "auto by default").
  static constexpr double kItlAuto = -1;
  double itl_target_ms = kItlAuto;
  // Before the API serves, a few small requests of the daemon's own go
  // through the ring (daemon/main.cpp, warm_up): every weight page is
  // touched, and the cost model has seen prefill and decode steps, so the
  // first real requests are budgeted and pipelined (docs/scheduler.md,
  // "Filling the pipeline"). false: serve at once, cold.
  bool warmup = true;
};

struct ServerCfg {
  std::string socket = "run/kvasir.sock";  // absolute after loading
  std::string http;                        // "" = no TCP listener; else "host:port"
  std::string api_key;                     // "" = no authentication on TCP
  std::string api_key_file;                // absolute after loading; its contents land in api_key
  uint64_t max_body = 8ull << 20;          // bytes of one HTTP request body
  double drain_timeout = 30;               // seconds to finish requests at shutdown
  double read_timeout = 30;                // seconds to receive one whole request (slowloris)
  // Open connections at once; beyond, new ones get 503. Bounds request
  // memory: max_connections × (max_body + 64 KiB of header).
  int32_t max_connections = 256;
  // The names clients use for the model (vLLM's --served-model-name): the
  // first is the id /v1/models lists first and the default "model" of a
  // response; a request may name any of them. Empty: the model file's own
  // name (general.name), with its file name accepted too.
  std::vector<std::string> served_model_name;
};

// Stage crash recovery (docs/recovery.md): the watchdog, the restart
// back-off and the restart limit. Ranges are checked in parse_config.
struct RecoveryCfg {
  double watchdog_k = 10;            // a batch held > k × p99 of the stage's batch times...
  double watchdog_floor_s = 10;      // ...and > this many seconds is a hang; 0 = no watchdog
  double watchdog_busy_cap_s = 600;  // a stage still using CPU is spared this long; 0 = forever
  double backoff_s = 0.05;           // delay before restarting a lost stage...
  double backoff_max_s = 5;          // ...doubling per loss within the window, up to this
  int32_t max_restarts = 5;          // losses tolerated within restart_window_s; 0 = fail-stop
  double restart_window_s = 60;      // the window max_restarts counts over
};

// [grammar]: structured outputs (docs/structured-outputs.md). Ranges are
// checked in parse_config.
struct GrammarCfg {
  bool enabled = true;  // false: no grammar table; structured requests get 400
  // The tail's compiler (the daemon only checks specs): not yet given to
  // the stages, which use these defaults.
  int32_t workers = 2;                 // compile threads
  int32_t cache_capacity = 128;        // compiled grammars kept
  double compile_timeout_s = 10;       // the longest a spec may take to compile
  uint64_t max_spec_bytes = 64 << 10;  // a schema, regex, grammar or tool set's text
};

// The bytes of a grammar-table entry (ipc/grammar_table.h) for specs of up
// to max_spec_bytes in grammar/'s wire form: its header and a 4-byte length
// per choice (at most 1,024 choices) come on top of the text.
inline uint64_t grammar_entry_capacity(const GrammarCfg& g) {
  return g.max_spec_bytes + 8192;
}

// [log]: the level of the daemon's and its stages' log (base/log.h;
// `kvasird --log-level` overrides it), and the per-batch log.
struct LogCfg {
  std::string level = "info";  // trace | debug | info | warn | error | off
  // A JSON line per micro-batch result (daemon/engine/batch_log.h); ""
  // = none. Absolute after loading.
  std::string batches;
};

// [speculative]: speculative decoding (docs/speculative.md). The names
// daemon/engine/drafter.h parses; ranges checked in parse_config.
struct SpeculativeCfg {
  std::string method = "none";          // none | ngram | suffix
  int32_t max_draft = 4;                // draft tokens per row per step, at most
  int32_t ngram_max = 4;                // prompt lookup's longest n-gram
  int32_t ngram_min = 2;                // and its shortest
  int32_t suffix_max_depth = 24;        // the suffix drafter's longest match
  double suffix_min_prob = 0.1;         // its stopping probability
  int32_t suffix_cache_requests = 256;  // finished outputs it keeps
  bool adaptive = true;                 // k per sequence per step, max_draft its bound
  int32_t probe_interval = 16;          // steps a turned-down sequence rests before a 1-draft probe
  double max_step_growth = 0;           // drafts' added share of a shared decode step, at most
  bool grammar_forced = true;           // constrained rows draft their grammar-forced tokens
};

// [cluster]: what joins the leader to its workers (docs/multi-host.md).
struct ClusterCfg {
  std::string key;  // the cluster key file (0600); absolute after loading; "" = none
  // How long the leader keeps trying to reach a worker that does not
  // answer at start-up (a worker pod may start after the leader's).
  double join_timeout_s = 300;
  // Nothing heard from a worker for this long is its loss (a host gone
  // without closing its connection); the leader pings it meanwhile.
  double link_timeout_s = 10;
};

struct Config {
  std::string source;  // the file it came from ("<string>" when parsed from text)
  ModelCfg model;
  PlanCfg plan;
  KvCfg kv;
  CudaCfg cuda;
  SchedulerCfg scheduler;
  ServerCfg server;
  RecoveryCfg recovery;
  GrammarCfg grammar;
  SpeculativeCfg speculative;
  LogCfg log;
  ClusterCfg cluster;
};

// "512MiB", "8 MiB", "1GiB", "4096", "64KiB", "1.5GiB", "100MB" (decimal) → bytes.
// Throws kvasir::Error naming `field` on anything else.
uint64_t parse_size(std::string_view text, const std::string& field);

// Parses TOML text. Relative paths resolve against base_dir. Applies every
// rule that needs no model (see validate_plan).
Config parse_config(std::string_view text, const std::string& base_dir,
                    const std::string& source = "<string>");
// Reads and parses a file; relative paths resolve against its folder.
Config load_config(const std::string& path);

// Plan rules that need no model: at least two stages (head and tail are
// distinct roles), widths > 0, devices well-formed, no GPU of one host
// named twice, ranges well-formed (first <= last) and in order without
// overlap or gap (unless every stage's layers are "auto": they are chosen
// at load).
void validate_plan(const PlanCfg& plan);

// Multi-host rules (config_cluster.cpp): each `host` is "ADDR:PORT"; the
// head is local; each run of consecutive stages on one host (remote_runs)
// names a host no other run names (a worker serves one session); every
// entry of an expert group names its leader's host (a group is on one
// host); a key file is named. Each refusal names the key and says why.
void validate_cluster(const Config& cfg);

// Sets the stages' layer ranges (layers = "auto", resolved): one inclusive
// range per stage, in order; then the plan rules apply as to written ones.
void apply_split(PlanCfg& plan, const std::vector<std::pair<int, int>>& ranges);

// Rules that need the model: ranges cover exactly 0..n_layers-1; a group's
// model has experts and its ranges end at the last one; kv.memory
// holds at least one block on every stage; devices this build can run; no
// CPU stage for a model with FP8 weights (the CPU backend does not read them).
void check_against_model(const Config& cfg, const ModelConfig& model);

// Opens the model (model.path must exist) and runs check_against_model.
// Returns the model's config for the caller's use.
ModelConfig check_config(const Config& cfg);

// KV bytes per block for `n_layers` layers of `model` (K and V).
uint64_t kv_bytes_per_block(const ModelConfig& model, int32_t n_layers, int32_t block_size,
                            const std::string& dtype);

}  // namespace kvasir
