// kernels/cpu/amx.h — AMX-INT8 (Sapphire Rapids and later) for the batch
// matmuls of quantised weights. Internal to kernels/cpu; see amx.cpp.
#pragma once

#include <string>

namespace kvasir::cpu {

// One line: whether the CPU has amx-tile/amx-int8 and whether the kernel
// granted the tile state to this process.
std::string amx_status();

}  // namespace kvasir::cpu
