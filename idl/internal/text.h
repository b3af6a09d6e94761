// Byte-level hygiene of IDL input (encoding, control characters, line
// endings) and positions in it.
#ifndef NAARPC_IDL_INTERNAL_TEXT_H_
#define NAARPC_IDL_INTERNAL_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "idl/diagnostic.h"
#include "idl/internal/sink.h"

namespace naarpc::idl::internal {

// Maps byte offsets to 1-based line and column (columns count code points;
// lines end at '\n', so CRLF counts once).
class LineIndex {
 public:
  explicit LineIndex(std::string_view text);
  Location At(size_t offset) const;

 private:
  std::string_view text_;
  std::vector<size_t> starts_;
};

// Decodes one strict UTF-8 sequence at s[i] (no overlong forms, surrogates or
// values above U+10FFFF) into `cp` and advances `i`; false if invalid.
bool DecodeUtf8(std::string_view s, size_t& i, char32_t& cp);

// Checks a whole file before parsing: UTF-8 (UTF-16/32 and Latin-1 are
// recognised), no NUL or control characters but tab/LF/CR-LF, no lone CR,
// no bidirectional overrides. Reports the first problem of each kind.
// Returns false if anything was reported.
bool CheckText(std::string_view text, const LineIndex& lines, Sink& sink);

// Checks a string value after YAML decoding (escapes in double-quoted
// strings can produce anything): "" if fine, else what is wrong.
std::string CheckDecodedString(std::string_view s);

// "U+0007".
std::string CodePointName(char32_t cp);

}  // namespace naarpc::idl::internal

#endif  // NAARPC_IDL_INTERNAL_TEXT_H_
