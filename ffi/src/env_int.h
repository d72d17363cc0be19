// Whole-integer environment values, shared by the handlers that read them (HELIX_MLA_DECODE_SEG_COST,
// HELIX_PEER_BLOCKS): a value is taken only if it is entirely a decimal integer in range, never a prefix
// ("128x", "abc" are not numbers), so a bad value reaches the caller's error that names the variable.
#pragma once

#include <cerrno>
#include <cstdlib>

namespace helix_ffi {

// Whether `s` is entirely a decimal integer in [lo, hi]; its value in *out if so.
inline bool ParseWholeInt(const char* s, long lo, long hi, int* out) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || n < lo || n > hi) return false;
  *out = (int)n;
  return true;
}

}  // namespace helix_ffi
