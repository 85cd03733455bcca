// The Jinja interpreter on its own: what is refused at load (and how the
// error names it), runtime errors, every limit, data ranges through string
// operations, concurrent rendering. Semantics construct by construct are
// pinned against jinja2 in test_jinja_refs.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "base/check.h"
#include "jinja/jinja.h"
#include "jinja/str.h"

using namespace kvasir;
using namespace kvasir::jinja;

namespace {

std::string render(const std::string& src, const Limits& limits = {},
                   std::vector<std::pair<std::string, Value>> vars = {}) {
  RenderOptions o;
  o.limits = limits;
  return Template(src).render(vars, o).bytes();
}

// The error a template fails with, at load or when rendering.
Error error_of(const std::string& src, const Limits& limits = {},
               std::vector<std::pair<std::string, Value>> vars = {}) {
  try {
    render(src, limits, std::move(vars));
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error from: " << (src.size() > 120 ? src.substr(0, 120) + "..." : src);
  return Error(__FILE__, __LINE__, "none");
}

// Sources and messages as test output, cut short (some sources are huge).
std::string shown(const std::string& s) {
  return s.size() > 120 ? s.substr(0, 120) + "..." : s;
}

void expect_load_error(const std::string& src, const std::string& fragment) {
  const Error e = error_of(src);
  EXPECT_EQ(e.code(), ErrorCode::kModelFormat) << shown(src) << ": " << shown(e.message());
  EXPECT_NE(e.message().find(fragment), std::string::npos)
      << shown(src) << ": " << shown(e.message());
}

void expect_render_error(const std::string& src, const std::string& fragment,
                         const Limits& limits = {}) {
  const Error e = error_of(src, limits);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << shown(src) << ": " << shown(e.message());
  EXPECT_NE(e.message().find(fragment), std::string::npos)
      << shown(src) << ": " << shown(e.message());
}

TEST(Jinja, RefusedAtLoadNamingTheConstruct) {
  expect_load_error("{% include 'x.jinja' %}", "unsupported construct '{% include %}'");
  expect_load_error("{% import 'x' as y %}", "'{% import %}'");
  expect_load_error("{% extends 'base' %}", "'{% extends %}'");
  expect_load_error("{% block body %}{% endblock %}", "'{% block %}'");
  expect_load_error("{% do x.append(1) %}", "'{% do %}'");
  expect_load_error("{% for x in l recursive %}{% endfor %}", "'recursive' loop");
  expect_load_error("{{ x | shuffle }}", "unsupported filter 'shuffle'");
  expect_load_error("{{ x is prime }}", "unsupported test 'prime'");
  expect_load_error("{% frobnicate %}", "unknown tag 'frobnicate'");
  expect_load_error("{% break %}", "'break' outside a loop");
  expect_load_error("{{ f(*args) }}", "*args");
  expect_load_error("{{ x[1, 2] }}", "tuple subscripts");
}

TEST(Jinja, SyntaxErrorsNameTheLine) {
  expect_load_error("line one\n{{ 'unterminated }}", "line 2");
  expect_load_error("{# no end", "missing end of comment");
  expect_load_error("{% raw %}no end", "missing {% endraw %}");
  expect_load_error("ok\n\n{{ (1 + 2 }}", "line 3");
  expect_load_error("{{ [1, 2) }}", "unexpected ')', expected ']'");
  expect_load_error("{% if true %}never closed", "missing {% elif or else or endif %}");
  expect_load_error("{% endfor %}", "unexpected '{% endfor %}'");
  expect_load_error("{% if x %}{% endfor %}", "unexpected '{% endfor %}'");
  expect_load_error("{{ 1 +* 2 }}", "expected an expression");
  expect_load_error("{{ x ", "unexpected end of template");
  expect_load_error("{{ '\\N{DASH}' }}", "\\N{...}");
  expect_load_error("{{ 99999999999999999999 }}", "out of range");
  expect_load_error(std::string("{{ '\xff' }}"), "not valid UTF-8");
}

TEST(Jinja, NestingTooDeepIsRefusedAtLoad) {
  std::string deep(1000, '(');
  expect_load_error("{{ " + deep + "1" + std::string(1000, ')') + " }}", "nested deeper");
  std::string blocks;
  for (int i = 0; i < 500; ++i) blocks += "{% if true %}";
  expect_load_error(blocks, "nested deeper");
  expect_load_error("{{ " + std::string(500, '-') + "1 }}", "nested deeper");
  expect_load_error("{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}",
                    "nested deeper");
}

TEST(Jinja, RuntimeErrorsNameTheLine) {
  expect_render_error("a\n{{ undefined_thing.attr }}", "line 2: 'undefined_thing' is undefined");
  expect_render_error("{{ 'a' + 1 }}", "can only concatenate str");
  expect_render_error("{{ 1 // 0 }}", "division");
  expect_render_error("{% for x in 3 %}{% endfor %}", "'int' object is not iterable");
  expect_render_error("{{ 'abc'.nope() }}", "has no attribute 'nope'");
  expect_render_error("{{ [1].append(2) }}", "unsafe");
  expect_render_error("{{ 2 ** 64 }}", "integer overflow");  // Python's ints are unbounded
  expect_render_error("{{ range(10, 0, 0) }}", "must not be zero");
  expect_render_error("{{ 'x'|tojson(separators=1) }}", "separators");
  expect_render_error("{{ 'x'|join(1, 2, 3) }}", "at most 2 arguments");
  expect_render_error("{{ 'x'|trim(nope=1) }}", "unexpected keyword argument 'nope'");
  expect_render_error("{% set ns = 1 %}{% set ns.a = 2 %}", "non-namespace");
}

TEST(Jinja, RaiseExceptionKeepsTheTemplatesMessage) {
  const Error e = error_of("line 1\n{{ raise_exception('Roles must alternate: ' ~ 3) }}");
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e.message(), "Roles must alternate: 3");
}

TEST(Jinja, OutputSizeLimit) {
  Limits l;
  l.max_output = 1000;
  EXPECT_EQ(render(std::string(1000, 'x'), l).size(), 1000u);
  expect_render_error(std::string(1001, 'x'), "exceeds the limit of 1000 bytes", l);
  expect_render_error("{{ 'x' * 2000 }}", "exceeds", l);
  expect_render_error("{% for i in range(100) %}{{ 'ab' * 10 }}{% endfor %}", "exceeds", l);
  expect_render_error(
      "{% set ns = namespace(s='ab') %}{% for i in range(20) %}"
      "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
      "exceeds", l);
  expect_render_error("{{ 'x'|indent(5000) }}", "exceeds", l);
  expect_render_error("{{ '%5000s'|format('x') }}", "exceeds", l);
  expect_render_error("{{ 'ab'|replace('', 'xxxxxxxxxx' * 99) }}", "exceeds", l);
  // The default: 8 MiB.
  expect_render_error("{{ 'x' * 9000000 }}", "exceeds the limit of 8388608 bytes");
}

TEST(Jinja, StepLimitBoundsTime) {
  Limits l;
  l.max_steps = 100000;
  expect_render_error("{% for i in range(100000) %}{% endfor %}", "more than 100000 steps", l);
  // The default stops a runaway template in about a second at worst.
  const auto t0 = std::chrono::steady_clock::now();
  expect_render_error(
      "{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}",
      "steps");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 10.0);
  std::printf("runaway loop stopped after %.2f s\n", s);
}

TEST(Jinja, RecursionLimits) {
  expect_render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
                      "macro calls nested deeper than 64");
  Limits l;
  l.max_call_depth = 3;
  EXPECT_EQ(render("{% macro f(n) %}{% if n < 3 %}{{ f(n + 1) }}{% endif %}{{ n }}{% endmacro %}"
                   "{{ f(1) }}",
                   l),
            "321");
  expect_render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "deeper than 3", l);
  // The deepest template the parser accepts, recursing as deep as allowed:
  // an error, not a stack overflow (sanitizer builds included).
  std::string deep = "{% macro f(n) %}";
  for (int i = 0; i < 90; ++i) deep += "{% if true %}";
  deep += "{{ f(n + 1) }}";
  for (int i = 0; i < 90; ++i) deep += "{% endif %}";
  expect_render_error(deep + "{% endmacro %}{{ f(0) }}", "nested deeper than 500 levels");
  l.max_nesting = 1000000;  // without the nesting limit, macro depth still stops it
  l.max_call_depth = 8;
  expect_render_error(deep + "{% endmacro %}{{ f(0) }}", "macro calls nested deeper than 8", l);
  // Values nested by a loop, then printed, serialised or compared.
  const std::string nest =
      "{% set ns = namespace(x=[]) %}{% for i in range(500) %}"
      "{% set ns.x = [ns.x] %}{% endfor %}";
  expect_render_error(nest + "{{ ns.x }}", "nested deeper");
  expect_render_error(nest + "{{ ns.x|tojson }}", "nested deeper");
  expect_render_error(nest + "{{ ns.x == ns.x }}", "nested deeper");
  // Namespaces are the only mutable values: one cannot hold another (no
  // cycles, no chains deeper than their recorded depth).
  expect_render_error("{% set ns = namespace() %}{% set ns.me = ns %}", "cannot hold a namespace");
  expect_render_error("{% set ns = namespace() %}{% set ns.l = [1, {'n': ns}] %}",
                      "cannot hold a namespace");
  expect_render_error("{% set a = namespace() %}{{ namespace(x=a) }}", "cannot hold a namespace");
  // Building a value deeper than the limit fails when it is built.
  expect_render_error(
      "{% set ns = namespace(x=[]) %}{% for i in range(300) %}"
      "{% set ns.x = {'k': ns.x} %}{% endfor %}",
      "nested deeper than 200");
}

TEST(Jinja, ListAndRangeLimits) {
  expect_render_error("{{ range(100001)|length }}", "range too big");
  EXPECT_EQ(render("{{ range(100000)|length }}"), "100000");
  Limits l;
  l.max_items = 1000;
  expect_render_error("{{ ([1] * 1001)|length }}", "1001 items exceeds", l);
  expect_render_error(
      "{% set ns = namespace(l=[1]) %}{% for i in range(20) %}"
      "{% set ns.l = ns.l + ns.l %}{% endfor %}",
      "exceeds", l);
}

TEST(Jinja, JsonInputLimits) {
  nlohmann::json deep = nlohmann::json::array();
  for (int i = 0; i < 300; ++i) deep = nlohmann::json::array({deep});
  EXPECT_THROW(from_json(deep, true), Error);
  EXPECT_THROW(from_json(nlohmann::json(uint64_t(1) << 63), true), Error);
  EXPECT_THROW(from_json(nlohmann::json(std::string("\xc3")), true), Error);
}

// Data ranges through the string operations (the rule: bytes derived from
// data stay data).
// Python's str.isspace(): the file/group/record/unit separators and NEL are
// space, as are Unicode's space separators; a zero-width space is not.
TEST(Jinja, PythonSpaceIsStrIsspace) {
  EXPECT_TRUE(is_python_space(0x1C));
  EXPECT_TRUE(is_python_space(0x85));
  EXPECT_TRUE(is_python_space(0x3000));
  EXPECT_FALSE(is_python_space(0x200B));
  EXPECT_FALSE(is_python_space('a'));
  EXPECT_FALSE(is_python_space(0x110000));
  EXPECT_EQ(render("[{{ '\x1f\u3000a b\u0085'|trim }}]"), "[a b]");
  EXPECT_EQ(render("[{{ '\\u200ba'.strip() }}]"), "[\u200ba]");
}

TEST(Jinja, DataRanges) {
  Str s = Str::markup("<a>");
  s.append(Str::data("user"));
  s.append("</a>", false);
  EXPECT_TRUE(s.data_in(3, 4));
  EXPECT_FALSE(s.data_in(0, 3));
  EXPECT_FALSE(s.data_in(7, 11));
  const Str mid = s.substr(2, 8);  // ">user<"
  ASSERT_EQ(mid.data_ranges().size(), 1u);
  EXPECT_EQ(mid.data_ranges()[0].begin, 1u);
  EXPECT_EQ(mid.data_ranges()[0].end, 5u);
  const auto segs = Template::segments(s);
  ASSERT_EQ(segs.size(), 3u);
  EXPECT_EQ(segs[1].text, "user");
  EXPECT_TRUE(segs[1].data);

  const std::vector<std::pair<std::string, Value>> vars = {{"u", Value::string("Ab<|x|>", true)}};
  RenderOptions o;
  for (const char* src :
       {"{{ u|upper }}", "{{ u|lower }}", "{{ u|title }}", "{{ u|capitalize }}", "{{ u[::-1] }}",
        "{{ u.split('<')|join('') }}", "{{ u|replace('x', 'y') }}", "{{ '%s'|format(u) }}",
        "{{ '{}'.format(u) }}", "{{ u|center(20)|trim }}", "{{ u|tojson }}",
        "{{ u|indent(2, true)|trim }}", "{{ u|list|join }}", "{{ u.strip('A') }}",
        "{% set b %}{{ u }}{% endset %}{{ b }}",
        "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(u) }}"}) {
    const Str out = Template(src).render(vars, o);
    // Every byte of the output came from u (the template adds no markup).
    for (size_t i = 0; i < out.size(); ++i) {
      if (out.bytes()[i] != ' ') {
        EXPECT_TRUE(out.data_in(i, i + 1)) << src << " at " << i;
      }
    }
  }
  // Markup the template writes next to data stays markup.
  const Str out = Template("[{{ u }}]").render(vars, o);
  EXPECT_FALSE(out.data_in(0, 1));
  EXPECT_TRUE(out.data_in(1, out.size() - 1));
  EXPECT_FALSE(out.data_in(out.size() - 1, out.size()));
}

TEST(Jinja, UndefinedBehavesAsJinja2Default) {
  EXPECT_EQ(render("[{{ nope }}][{{ nope is defined }}][{{ nope|length }}][{% for x in nope %}x"
                   "{% endfor %}][{{ nope|default('d') }}][{{ not nope }}]"),
            "[][False][0][][d][True]");
  expect_render_error("{{ nope.attr }}", "'nope' is undefined");
  expect_render_error("{{ nope() }}", "'nope' is undefined");
  expect_render_error("{{ nope + 1 }}", "'nope' is undefined");
}

TEST(Jinja, StrftimeNowUsesTheGivenClock) {
  RenderOptions o;
  o.now.tm_year = 2025 - 1900, o.now.tm_mon = 0, o.now.tm_mday = 2, o.now.tm_wday = 4;
  EXPECT_EQ(Template("{{ strftime_now('%d %b %Y, %A') }}").render({}, o).bytes(),
            "02 Jan 2025, Thursday");
}

// Random edits of the real templates (bytes deleted, duplicated, swapped;
// delimiters and keywords inserted): each one loads and renders, or fails
// with a kvasir::Error; never another exception, a crash or a hang.
TEST(Jinja, MutatedTemplatesFailCleanly) {
  std::vector<std::string> sources;
  for (const auto& e : std::filesystem::directory_iterator(std::string(KVASIR_SOURCE_DIR) +
                                                           "/tests/data/chat_templates")) {
    if (e.path().extension() != ".jinja") continue;
    std::ifstream in(e.path());
    std::ostringstream s;
    s << in.rdbuf();
    sources.push_back(s.str());
  }
  ASSERT_GE(sources.size(), 10u);
  const auto msgs = nlohmann::json::parse(R"([
    {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call12345", "type": "function",
      "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
    {"role": "tool", "content": "1", "tool_call_id": "call12345"},
    {"role": "user", "content": [{"type": "text", "text": "more"}]}])");
  const auto tools = nlohmann::json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
          "properties": {"a": {"type": "integer"}}}}}])");
  const std::vector<std::pair<std::string, Value>> vars = {
      {"messages", from_json(msgs, true)},    {"tools", from_json(tools, true)},
      {"add_generation_prompt", Value(true)}, {"bos_token", Value::string("<s>")},
      {"eos_token", Value::string("</s>")},   {"enable_thinking", Value(false)}};
  const char* inserts[] = {"{{",  "}}", "{%",    "%}",     "{#",    "#}",    "(",
                           ")",   "[",  "]",     "'",      "\"",    "|",     "-",
                           "~",   "*",  "**",    " is ",   " not ", " in ",  "loop",
                           "for", "if", "endif", "endfor", "set",   "macro", "range(99999)",
                           ".",   ",",  "0",     "-1",     "\\",    "\n",    "é"};
  std::mt19937 rng(20240726);
  RenderOptions o;
  o.limits.max_steps = 200000;
  o.limits.max_output = 1 << 20;
  int rendered = 0, failed = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string src = sources[rng() % sources.size()];
    for (int k = 0, n = 1 + int(rng() % 4); k < n && !src.empty(); ++k) {
      const size_t at = rng() % src.size(), len = std::min<size_t>(1 + rng() % 8, src.size() - at);
      switch (rng() % 4) {
        case 0:
          src.erase(at, len);
          break;
        case 1:
          src.insert(at, src.substr(at, len));
          break;
        case 2:
          std::swap(src[at], src[rng() % src.size()]);
          break;
        default:
          src.insert(at, inserts[rng() % std::size(inserts)]);
      }
    }
    try {
      Template(src).render(vars, o);
      ++rendered;
    } catch (const Error&) {
      ++failed;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a kvasir::Error: " << e.what() << "\n" << shown(src);
    }
  }
  std::printf("%d mutated templates rendered, %d refused or failed cleanly\n", rendered, failed);
}

// A Template is immutable: threads may render it together.
TEST(Jinja, ConcurrentRendering) {
  const Template t(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "{{ m.content|upper }}{% endfor %}{{ ns.n }}");
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      nlohmann::json msgs = nlohmann::json::array();
      for (int i = 0; i <= k; ++i) msgs.push_back({{"content", "t" + std::to_string(k)}});
      std::string want;
      for (int i = 0; i <= k; ++i) want += "T" + std::to_string(k);
      want += std::to_string(k + 1);
      for (int i = 0; i < 300; ++i)
        if (t.render({{"messages", from_json(msgs, true)}}, {}).bytes() != want) ++bad;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
