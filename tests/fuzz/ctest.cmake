# tests/fuzz/ctest.cmake — the fuzz smoke test of the normal (g++) build.
# scripts/fuzz builds the targets with clang in its own folder inside this
# build and runs each for 10 s after replaying its corpus and regressions
# (CI's budget: 60 s each made this test the longest of pass 1, 30 s each
# over five targets took 329 s, and at 20 s a slow host's whole CI passed
# 30 minutes); it exits 77 (skipped) without clang/libFuzzer. Longer runs:
# scripts/fuzz 60.
# Run it alone with: ctest -L fuzz; leave it out with: ctest -LE fuzz.
add_test(NAME fuzz_smoke COMMAND ${CMAKE_SOURCE_DIR}/scripts/fuzz 10)
set_tests_properties(fuzz_smoke PROPERTIES LABELS fuzz TIMEOUT 1200 SKIP_RETURN_CODE 77 COST 500
                     ENVIRONMENT "FUZZ_DIR=${CMAKE_BINARY_DIR}/fuzz;JOBS=2")
