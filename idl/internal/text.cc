#include "idl/internal/text.h"

#include <algorithm>
#include <cstdio>

namespace naarpc::idl::internal {
namespace {

bool IsBidiControl(char32_t cp) {
  return (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

// YAML 1.2's printable set (c-printable), plus tab and LF.
bool IsAllowed(char32_t cp) {
  return cp == 0x09 || cp == 0x0A || (cp >= 0x20 && cp <= 0x7E) || cp == 0x85 ||
         (cp >= 0xA0 && cp <= 0xD7FF) || (cp >= 0xE000 && cp <= 0xFFFD) ||
         (cp >= 0x10000 && cp <= 0x10FFFF);
}

std::string Hex2(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

std::string More(size_t n, const char* what) {
  if (n == 0) return "";
  return " (" + std::to_string(n) + " more " + what + " in the file)";
}

}  // namespace

LineIndex::LineIndex(std::string_view text) : text_(text) {
  starts_.push_back(0);
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n') starts_.push_back(i + 1);
  }
}

Location LineIndex::At(size_t offset) const {
  offset = std::min(offset, text_.size());
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), offset);
  const size_t line = static_cast<size_t>(it - starts_.begin());  // >= 1
  const size_t start = starts_[line - 1];
  int column = 1;
  for (size_t i = start; i < offset; ++i) {
    if ((static_cast<unsigned char>(text_[i]) & 0xC0) != 0x80) ++column;
  }
  return Location{static_cast<int>(line), column};
}

bool DecodeUtf8(std::string_view s, size_t& i, char32_t& cp) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    cp = b0;
    ++i;
    return true;
  }
  size_t n;
  char32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return false;
  }
  if (i + n > s.size()) return false;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  i += n;
  return true;
}

std::string CodePointName(char32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
  return buf;
}

bool CheckText(std::string_view text, const LineIndex& lines, Sink& sink) {
  const auto starts_with = [&](std::string_view p) { return text.substr(0, p.size()) == p; };
  using namespace std::string_view_literals;
  if (starts_with("\x00\x00\xFE\xFF"sv) || starts_with("\xFF\xFE\x00\x00"sv)) {
    sink.Error({1, 1}, "", "the file is UTF-32 (it starts with a byte-order mark); IDL files "
                           "are UTF-8: convert it (iconv -f UTF-32 -t UTF-8)");
    return false;
  }
  if (starts_with("\xFE\xFF"sv) || starts_with("\xFF\xFE"sv)) {
    sink.Error({1, 1}, "", "the file is UTF-16 (it starts with a byte-order mark); IDL files "
                           "are UTF-8: convert it (iconv -f UTF-16 -t UTF-8)");
    return false;
  }
  // UTF-16/32 without a byte-order mark: ASCII text with NUL bytes between.
  const size_t head = std::min<size_t>(text.size(), 64);
  const size_t head_nuls =
      static_cast<size_t>(std::count(text.begin(), text.begin() + head, '\0'));
  if (head >= 4 && head_nuls * 4 >= head) {
    sink.Error({1, 1}, "", "the file looks like UTF-16 or UTF-32 (NUL bytes between the "
                           "characters); IDL files are UTF-8: convert it (iconv)");
    return false;
  }

  size_t bad_utf8 = 0, nuls = 0, controls = 0, lone_cr = 0, bidi = 0;
  size_t first_bad_utf8 = 0, first_nul = 0, first_control = 0, first_cr = 0, first_bidi = 0;
  char32_t control_cp = 0, bidi_cp = 0;
  unsigned char bad_byte = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t at = i;
    char32_t cp;
    if (!DecodeUtf8(text, i, cp)) {
      if (bad_utf8++ == 0) first_bad_utf8 = at, bad_byte = static_cast<unsigned char>(text[at]);
      ++i;
      continue;
    }
    if (cp == 0) {
      if (nuls++ == 0) first_nul = at;
    } else if (cp == '\r') {
      if (i >= text.size() || text[i] != '\n') {
        if (lone_cr++ == 0) first_cr = at;
      }
    } else if (IsBidiControl(cp)) {
      if (bidi++ == 0) first_bidi = at, bidi_cp = cp;
    } else if (!IsAllowed(cp)) {
      if (controls++ == 0) first_control = at, control_cp = cp;
    }
  }
  if (bad_utf8) {
    sink.Error(lines.At(first_bad_utf8), "",
               "invalid UTF-8 (byte " + Hex2(bad_byte) + "); IDL files are UTF-8 — if this "
               "one is Latin-1, convert it (iconv -f LATIN1 -t UTF-8)" +
                   More(bad_utf8 - 1, "invalid bytes"));
  }
  if (nuls) {
    sink.Error(lines.At(first_nul), "",
               "NUL byte: an IDL file is text" + More(nuls - 1, "NUL bytes"));
  }
  if (controls) {
    sink.Error(lines.At(first_control), "",
               "control character " + CodePointName(control_cp) +
                   " is not allowed in an IDL file (only tab, LF and CR-LF)" +
                   More(controls - 1, "control characters"));
  }
  if (lone_cr) {
    sink.Error(lines.At(first_cr), "",
               "carriage return without a line feed (old Mac line ending); use LF or "
               "CR-LF line endings" + More(lone_cr - 1, "lone carriage returns"));
  }
  if (bidi) {
    sink.Error(lines.At(first_bidi), "",
               "bidirectional control character " + CodePointName(bidi_cp) +
                   " (it can make text display differently from what it is, "
                   "CVE-2021-42574)" + More(bidi - 1, "such characters"));
  }
  return (bad_utf8 | nuls | controls | lone_cr | bidi) == 0;
}

std::string CheckDecodedString(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    if (!DecodeUtf8(s, i, cp)) return "the string is not valid UTF-8 (after escapes)";
    if (cp == '\t' || cp == '\n' || cp == '\r') continue;
    if (IsBidiControl(cp)) {
      return "the string contains the bidirectional control character " + CodePointName(cp) +
             " (CVE-2021-42574)";
    }
    if (!IsAllowed(cp)) {
      return "the string contains the control character " + CodePointName(cp) +
             " (only tab, line feed and carriage return are allowed)";
    }
  }
  return "";
}

}  // namespace naarpc::idl::internal
