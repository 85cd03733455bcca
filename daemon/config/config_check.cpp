// check_config lives apart from config.cpp so the parser and plan rules
// build (and are tested) without the model readers.
#include <filesystem>

#include "base/check.h"
#include "daemon/config/config.h"
#include "model/model_file.h"

namespace kvasir {
namespace fs = std::filesystem;

ModelConfig check_config(const Config& cfg) {
  std::error_code ec;
  KV_CHECK(fs::exists(cfg.model.path, ec), "model.path: {}: no such file or folder",
           cfg.model.path);
  auto model = ModelFile::open(cfg.model.path);
  ModelConfig m = model->config();
  check_against_model(cfg, m);
  return m;
}

}  // namespace kvasir
