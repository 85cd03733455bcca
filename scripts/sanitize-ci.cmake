# scripts/sanitize-ci.cmake — CMAKE_PROJECT_INCLUDE of CI's sanitized build
# (scripts/test --sanitize-ci, docs/reliability.md "Sanitizers"). That build
# compiles at -O0 (a third of the compile time of -O1 under ASan + UBSan,
# daemon/http_server.cpp alone 144 s of CPU at -O1), but the code that runs
# the model would then make every test several times slower (test_api_e2e
# 239 s against 64 s; test_drain missed its 30 s drain): the targets below
# get -O1 back. A target's COMPILE_OPTIONS come after CMAKE_CXX_FLAGS_<CONFIG>
# on the command line, so their -O1 wins. Deferred to the end of the top
# directory: the targets do not exist yet when project() includes this file.
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL kvasir_sanitize_ci_opt)
function(kvasir_sanitize_ci_opt)
  # The CPU kernels and the stage's forward pass and sampler (kvasir_stages),
  # and the ring's shared-memory transfers (kvasir_ipc): per token, per row.
  foreach(t kvasir_kernels_cpu kvasir_stages kvasir_ipc)
    if(TARGET ${t})
      set_property(TARGET ${t} APPEND PROPERTY COMPILE_OPTIONS "$<$<COMPILE_LANGUAGE:C,CXX>:-O1>")
    endif()
  endforeach()
endfunction()
