# grammar/xgrammar.cmake — kvasir_xgrammar: XGrammar's C++ core as a static
# library, compiled from the sdist that scripts/fetch-xgrammar unpacked into
# KVASIR_XGRAMMAR_DIR (top-level CMakeLists.txt). Not the sdist's own CMake:
# it sets -Werror and -flto=auto and installs its library and headers. Here:
# the core's sources by name (the Python bindings in cpp/tvm_ffi/, its tests
# and cpptrace are left out), C++17 as upstream, warnings silenced (not our
# code), plus our logging hooks (xgrammar_hooks.cpp: XGrammar's documented
# XGRAMMAR_LOG_CUSTOMIZE hook, so its messages reach base/log.h, not stderr).
#
# Every file is needed: a program that compiles a JSON schema, a regex and an
# EBNF grammar and runs a matcher pulls all of them from the archive (grammar.cc
# links the Lark and structural-tag converters, which link converter_ext/);
# config.cc is what sets the recursion bound. A newer sdist that adds a file
# fails to link until the file is named here: a deliberate, visible change.
# Build time: docs/structured-outputs.md ("Building XGrammar").

set(_xgrammar_core
  compiled_grammar.cc config.cc earley_parser.cc fsm.cc fsm_builder.cc grammar.cc
  grammar_builder.cc grammar_compiler.cc grammar_functor.cc grammar_matcher.cc
  grammar_parser.cc grammar_printer.cc json_schema_converter.cc lark_converter.cc
  regex_converter.cc structural_tag.cc suffix_automata.cc testing.cc tokenizer_info.cc
  converter_ext/cohere.cc converter_ext/deepseek.cc converter_ext/gemma.cc
  converter_ext/glm.cc converter_ext/kimi_k3.cc converter_ext/minimax.cc
  converter_ext/minimax_m3.cc converter_ext/qwen.cc
  support/logging.cc support/recursion_guard.cc)
list(TRANSFORM _xgrammar_core PREPEND ${KVASIR_XGRAMMAR_DIR}/cpp/)

add_library(kvasir_xgrammar STATIC ${_xgrammar_core} xgrammar_hooks.cpp)
# -w: not our code, its warnings are not ours to fix (our hooks file keeps ours).
set_source_files_properties(${_xgrammar_core} PROPERTIES COMPILE_OPTIONS "-w")
set_target_properties(kvasir_xgrammar PROPERTIES CXX_STANDARD 17)
target_compile_definitions(kvasir_xgrammar
  PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0 XGRAMMAR_ENABLE_INTERNAL_CHECK=0
  PRIVATE XGRAMMAR_LOG_CUSTOMIZE=1)
target_include_directories(kvasir_xgrammar SYSTEM
  PUBLIC ${KVASIR_XGRAMMAR_DIR}/include ${KVASIR_XGRAMMAR_DIR}/3rdparty/dlpack/include
  PRIVATE ${KVASIR_XGRAMMAR_DIR}/cpp ${KVASIR_XGRAMMAR_DIR}/3rdparty/picojson)
target_link_libraries(kvasir_xgrammar PUBLIC kvasir_base Threads::Threads)
