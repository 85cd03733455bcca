// bench_grammar_compile — how long each JSON schema of a list takes to
// compile against a model's vocabulary (the grammar engine alone, as the
// tail stage does once per new spec), what a cache hit costs, and what the
// daemon's check on arrival costs (check_grammar: every structured request
// pays it on the API's io thread). The figures of docs/structured-outputs.md.
//
//   bench_grammar_compile MODEL.gguf SCHEMAS.json [--repeat N]
//
// SCHEMAS.json: [{"name", "schema"}, ...] (tests/integration/structured_schemas.json).
// Each schema is compiled N times (default 5) with the cache cleared before
// each (cold), then once more from the cache (hit), and checked N times;
// prints the median and the largest cold time, the hit's time, the median
// check, and XGrammar's memory estimate.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

using namespace kvasir;
using namespace kvasir::grammar;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Row {
  std::string name;
  double median_ms = 0, max_ms = 0, hit_ms = 0, check_ms = 0;
  size_t bytes = 0;
};

// N cold compilations and one cache hit of one spec; false on a refusal.
bool measure(GrammarCompiler& c, const GrammarSpec& spec,
             const std::shared_ptr<const Vocabulary>& vocab, int repeat, Row& row) {
  std::vector<double> cold;
  std::shared_ptr<const CompiledGrammar> g;
  for (int r = 0; r < repeat; ++r) {
    c.clear_cache();
    const auto t0 = Clock::now();
    const Status st = c.compile(spec, vocab, &g);
    cold.push_back(ms_since(t0));
    if (!st.ok()) {
      std::fprintf(stderr, "%s: %s\n", row.name.c_str(), st.message().c_str());
      return false;
    }
  }
  const auto t0 = Clock::now();
  if (!c.compile(spec, vocab, &g).ok()) return false;
  row.hit_ms = ms_since(t0);
  std::sort(cold.begin(), cold.end());
  row.median_ms = cold[cold.size() / 2];
  row.max_ms = cold.back();
  row.bytes = g->memory_bytes();
  std::vector<double> checks;
  for (int r = 0; r < repeat; ++r) {
    const auto t1 = Clock::now();
    if (!check_grammar(spec, c.options()).ok()) return false;
    checks.push_back(ms_since(t1));
  }
  std::sort(checks.begin(), checks.end());
  row.check_ms = checks[checks.size() / 2];
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_grammar_compile MODEL.gguf SCHEMAS.json [--repeat N]\n");
    return 2;
  }
  int repeat = 5;
  for (int i = 3; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--repeat") repeat = std::max(1, std::atoi(argv[i + 1]));
  auto gguf = GgufFile::open(argv[1]);
  auto tok = Tokenizer::from_gguf(*gguf);
  const auto t0 = Clock::now();
  auto vocab = Vocabulary::from_tokenizer(*tok);
  std::printf("vocabulary: %d tokens, built in %.1f ms\n", vocab->size(), ms_since(t0));
  std::ifstream in(argv[2]);
  const auto schemas = nlohmann::json::parse(in);

  GrammarCompiler compiler;  // the daemon's defaults (2 workers, 1 thread each)
  std::printf("%-18s %12s %10s %10s %10s %10s\n", "schema", "median ms", "max ms", "hit ms",
              "check ms", "KiB");
  std::vector<Row> rows;
  bool ok = true;
  std::vector<std::pair<std::string, GrammarSpec>> specs{{"json_object", GrammarSpec::json_object()}};
  for (const auto& s : schemas)
    specs.emplace_back(s["name"].get<std::string>(), GrammarSpec::json_schema(s["schema"].dump()));
  for (const auto& [name, spec] : specs) {
    Row row{name};
    if (!measure(compiler, spec, vocab, repeat, row)) {
      ok = false;
      continue;
    }
    std::printf("%-18s %12.1f %10.1f %10.3f %10.3f %10.0f\n", row.name.c_str(), row.median_ms,
                row.max_ms, row.hit_ms, row.check_ms, row.bytes / 1024.0);
    rows.push_back(row);
  }
  std::vector<double> med;
  for (const Row& r : rows) med.push_back(r.median_ms);
  std::sort(med.begin(), med.end());
  if (!med.empty())
    std::printf("over %zu specs: median of medians %.1f ms, largest median %.1f ms (repeat %d)\n",
                med.size(), med[med.size() / 2], med.back(), repeat);
  return ok ? 0 : 1;
}
