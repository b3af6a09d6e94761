// Decimal text of a 128-bit unsigned integer: sizes computed exactly where
// 64 bits could overflow (an IDL parameter's bytes, a layout's extent).
#ifndef NAARPC_RUNTIME_U128_TEXT_H_
#define NAARPC_RUNTIME_U128_TEXT_H_

#include <string>

namespace naarpc::internal {

inline std::string U128Text(unsigned __int128 v) {
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  } while (v != 0);
  return digits;
}

}  // namespace naarpc::internal

#endif  // NAARPC_RUNTIME_U128_TEXT_H_
