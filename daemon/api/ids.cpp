#include "daemon/api/ids.h"

#include <stdlib.h>

#include <vector>

namespace kvasir {

std::string random_hex(size_t bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::vector<unsigned char> raw(bytes);
  arc4random_buf(raw.data(), raw.size());
  std::string out;
  out.reserve(2 * bytes);
  for (unsigned char b : raw) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

uint64_t random_u64() {
  uint64_t v = 0;
  arc4random_buf(&v, sizeof v);
  return v;
}

}  // namespace kvasir
