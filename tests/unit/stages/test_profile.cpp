// What each layer costs (stages/profile.cpp, measure_layer_costs), on a tiny
// model the test writes: a cost for every layer, the tail's output head as a
// positive extra, the shape it was measured for echoed back, with and
// without the prompt piece that layers = "auto" adds to the decode rows; and
// a shape out of range refused before anything runs. No timing is compared
// (speed belongs to bench/): only that the profile ran what it says.
#include <gtest/gtest.h>

#include "base/check.h"
#include "stages/stage.h"
#include "tests/support/test_files.h"
#include "tests/support/tiny_model.h"

namespace kvasir {
namespace {

std::string tiny_model(const test::TempDir& dir) {
  test::TinySpec s;
  s.layers = 3;
  s.vocab = 4096;  // an output head that costs more than one layer's share
  const std::string path = dir.file("tiny.gguf");
  test::write_tiny_gguf(path, s);
  return path;
}

TEST(Profile, EveryLayerAndTheEndsWithAndWithoutAPromptPiece) {
  test::TempDir dir;
  const std::string path = tiny_model(dir);
  for (int prefill : {0, 7}) {
    SCOPED_TRACE(prefill);
    const LayerCosts c = measure_layer_costs(path, 1, 5, prefill, 40, 3);
    EXPECT_EQ(c.rows, 5);
    EXPECT_EQ(c.prefill, prefill);
    EXPECT_EQ(c.context, 40);
    ASSERT_EQ(c.layer_ms.size(), 3u);
    for (double ms : c.layer_ms) EXPECT_GT(ms, 0.0);
    EXPECT_GE(c.head_ms, 0.0);
    // The tail's final norm and a [rows, 4096] output head over a 64-wide
    // hidden state: more than nothing whatever the machine.
    EXPECT_GT(c.tail_ms, 0.0);
  }
}

TEST(Profile, ShapeOutOfRangeIsRefused) {
  test::TempDir dir;
  const std::string path = tiny_model(dir);
  test::expect_error([&] { measure_layer_costs(path, 1, 0, 4, 16, 1); }, {"bad shape", "rows 0"});
  test::expect_error([&] { measure_layer_costs(path, 1, 4, -1, 16, 1); },
                     {"bad shape", "prefill -1"});
  test::expect_error([&] { measure_layer_costs(path, 1, 4, 1 << 17, 16, 1); },
                     {"bad shape", "prefill 131072"});
  test::expect_error([&] { measure_layer_costs(path, 1, 4, 4, -3, 1); },
                     {"bad shape", "context -3"});
  test::expect_error([&] { measure_layer_costs(path, 1, 4, 4, 16, 0); },
                     {"bad shape", "repeats 0"});
  // The tiny model's context is 512 positions.
  test::expect_error([&] { measure_layer_costs(path, 1, 4, 8, 505, 1); },
                     {"positions up to 513", "context of 512"});
}

TEST(Profile, AMissingModelIsAnError) {
  test::TempDir dir;
  EXPECT_THROW(measure_layer_costs(dir.file("absent.gguf"), 1, 4, 4, 16, 1), Error);
}

}  // namespace
}  // namespace kvasir
