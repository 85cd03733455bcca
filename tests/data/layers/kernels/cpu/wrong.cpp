// A deliberately wrong include: a kernel must not see the engine.
// scripts/check-layers must refuse this tree (ctest check_layers_catches).
#include "base/check.h"
#include "daemon/engine/bridge.h"
