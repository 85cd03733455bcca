// tests/unit/model/jinja_refs.h — reading tests/data/chat_templates/refs.json
// (written by tests/reference/chat_templates/make_refs.py with jinja2).
#pragma once

#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "model/chat_template.h"

namespace kvasir::test {

inline std::string source_path(const std::string& rel) {
  return std::string(KVASIR_SOURCE_DIR) + "/" + rel;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline const nlohmann::ordered_json& refs() {
  static const nlohmann::ordered_json j =
      nlohmann::ordered_json::parse(read_text(source_path("tests/data/chat_templates/refs.json")));
  return j;
}

// The clock the references were rendered at (make_refs.py's NOW).
inline std::tm refs_now() {
  std::tm t{};
  t.tm_year = 2024 - 1900, t.tm_mon = 6, t.tm_mday = 26, t.tm_hour = 12;
  t.tm_wday = 5, t.tm_yday = 207;
  return t;
}

inline ChatTemplate ref_template(const std::string& name) {
  const auto& t = refs()["templates"][name];
  return ChatTemplate::from_string(
      read_text(source_path("tests/data/chat_templates/" + t["file"].get<std::string>())),
      t["bos"].get<std::string>(), t["eos"].get<std::string>(), name);
}

// The input of one reference case.
inline ChatInput ref_input(const nlohmann::ordered_json& c) {
  ChatInput in;
  in.messages = refs()["conversations"][c["conversation"].get<std::string>()];
  if (c["tools"].get<bool>()) in.tools = refs()["tools"];
  in.add_generation_prompt = c["add_generation_prompt"].get<bool>();
  in.kwargs = c["extra"];
  in.now = refs_now();
  return in;
}

}  // namespace kvasir::test
