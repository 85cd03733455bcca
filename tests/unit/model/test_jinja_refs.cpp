// Byte equality with jinja2 (as transformers configures it): every
// reference template over every reference conversation, and the construct
// snippets, from tests/data/chat_templates/refs.json. No Python here.
#include <gtest/gtest.h>

#include <map>
#include <optional>

#include "base/check.h"
#include "jinja/jinja.h"
#include "tests/unit/model/jinja_refs.h"

using namespace kvasir;
using kvasir::test::refs;

namespace {

std::string case_name(const nlohmann::ordered_json& c) {
  return c["template"].get<std::string>() + "/" + c["conversation"].get<std::string>() +
         (c["tools"].get<bool>() ? "/tools" : "") +
         (c["add_generation_prompt"].get<bool>() ? "/gen" : "") + "/" + c["extra"].dump();
}

TEST(JinjaRefs, TemplatesMatchJinja2) {
  std::map<std::string, ChatTemplate> templates;
  for (auto it = refs()["templates"].begin(); it != refs()["templates"].end(); ++it)
    templates.emplace(it.key(), test::ref_template(it.key()));
  std::map<std::string, std::pair<int, int>> per;  // renderings, expected errors
  for (const auto& c : refs()["cases"]) {
    const ChatTemplate& t = templates.at(c["template"].get<std::string>());
    const ChatInput in = test::ref_input(c);
    auto& [n, errors] = per[c["template"].get<std::string>()];
    ++n;
    if (c.contains("expected")) {
      try {
        EXPECT_EQ(t.apply(in).text(), c["expected"].get<std::string>()) << case_name(c);
      } catch (const Error& e) {
        ADD_FAILURE() << case_name(c) << ": " << e.message();
      }
      continue;
    }
    ++errors;
    try {
      t.apply(in);
      ADD_FAILURE() << case_name(c) << ": expected an error like " << c.dump();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << case_name(c);
      if (c.contains("raised")) {
        EXPECT_EQ(e.message(), c["raised"].get<std::string>()) << case_name(c);
      }
    }
  }
  for (const auto& [name, counts] : per)
    std::printf("%-18s %4d renderings (%d of them errors in jinja2 too)\n", name.c_str(),
                counts.first, counts.second);
  std::printf("jinja2 %s\n", refs()["jinja2"].get<std::string>().c_str());
}

TEST(JinjaRefs, SnippetsMatchJinja2) {
  int n = 0;
  for (const auto& s : refs()["snippets"]) {
    const std::string src = s["template"].get<std::string>();
    ++n;
    if (s.contains("syntax_error")) {
      EXPECT_THROW(jinja::Template t(src), Error) << src;
      continue;
    }
    // What jinja2 only fails on when rendering ({% include %}) is refused at load here.
    std::optional<jinja::Template> t;
    try {
      t.emplace(src);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kModelFormat) << src;
      EXPECT_FALSE(s.contains("expected")) << src << ": refused at load: " << e.message();
      continue;
    }
    std::vector<std::pair<std::string, jinja::Value>> vars = {
        {"messages", jinja::Value::none()},         {"tools", jinja::Value::none()},
        {"documents", jinja::Value::none()},        {"add_generation_prompt", jinja::Value(false)},
        {"bos_token", jinja::Value::string("<s>")}, {"eos_token", jinja::Value::string("</s>")}};
    for (auto it = s["context"].begin(); it != s["context"].end(); ++it)
      vars.emplace_back(it.key(), jinja::from_json(it.value(), true));
    jinja::RenderOptions opt;
    opt.now = test::refs_now();
    try {
      const std::string out = t->render(vars, opt).bytes();
      if (s.contains("expected")) {
        EXPECT_EQ(out, s["expected"].get<std::string>()) << src;
      } else {
        ADD_FAILURE() << src << ": rendered '" << out << "', jinja2 failed: " << s.dump();
      }
    } catch (const Error& e) {
      if (s.contains("expected")) {
        ADD_FAILURE() << src << ": " << e.message();
      } else {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << src;
        if (s.contains("raised")) {
          EXPECT_EQ(e.message(), s["raised"].get<std::string>());
        }
      }
    }
  }
  EXPECT_GE(n, 100);
}

}  // namespace
