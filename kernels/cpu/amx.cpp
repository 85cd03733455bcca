#include "kernels/cpu/amx.h"

namespace kvasir::cpu {

std::string amx_status() {
  return "not built";
}

}  // namespace kvasir::cpu
