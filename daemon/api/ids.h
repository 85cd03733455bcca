// daemon/api/ids.h — identifiers the API hands out (response ids, tool call
// ids): unique across restarts and replicas of the daemon, and unpredictable,
// so that one client cannot guess another's ids. Drawn from the C library's
// arc4random (a ChaCha20 generator seeded from the kernel's getrandom, safe
// across fork); thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvasir {

// `bytes` random bytes as 2 * bytes lowercase hex digits.
std::string random_hex(size_t bytes);

// 64 random bits.
uint64_t random_u64();

}  // namespace kvasir
