#include "idl/internal/scalar.h"

#include <cctype>
#include <limits>

namespace naarpc::idl::internal {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

bool AllOf(std::string_view s, bool (*pred)(char)) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!pred(c)) return false;
  }
  return true;
}

std::string_view StripSign(std::string_view s) {
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  return s;
}

bool OneOf(std::string_view s, std::initializer_list<std::string_view> words) {
  for (std::string_view w : words) {
    if (s == w) return true;
  }
  return false;
}

bool IsNull(std::string_view s) { return OneOf(s, {"", "~", "null", "Null", "NULL"}); }

// YAML 1.2 core float: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?,
// [-+]?\.(inf|Inf|INF), \.(nan|NaN|NAN).
bool IsFloat12(std::string_view s) {
  if (OneOf(s, {".nan", ".NaN", ".NAN"})) return true;
  std::string_view u = StripSign(s);
  if (OneOf(u, {".inf", ".Inf", ".INF"})) return true;
  size_t i = 0, int_digits = 0, frac_digits = 0;
  while (i < u.size() && IsDigit(u[i])) ++i, ++int_digits;
  bool dot = false;
  if (i < u.size() && u[i] == '.') {
    dot = true;
    ++i;
    while (i < u.size() && IsDigit(u[i])) ++i, ++frac_digits;
  }
  if (int_digits == 0 && frac_digits == 0) return false;
  bool exp = false;
  if (i < u.size() && (u[i] == 'e' || u[i] == 'E')) {
    exp = true;
    ++i;
    if (i < u.size() && (u[i] == '-' || u[i] == '+')) ++i;
    size_t e = 0;
    while (i < u.size() && IsDigit(u[i])) ++i, ++e;
    if (e == 0) return false;
  }
  return i == u.size() && (dot || exp);
}

// Sexagesimal (YAML 1.1): [-+]?[1-9][0-9_]*(:[0-5]?[0-9])+ (and a float form
// with a fractional part).
bool IsSexagesimal11(std::string_view s) {
  std::string_view u = StripSign(s);
  const size_t colon = u.find(':');
  if (colon == std::string_view::npos || colon == 0 || u[0] < '1' || u[0] > '9') return false;
  for (size_t i = 1; i < colon; ++i) {
    if (!IsDigit(u[i]) && u[i] != '_') return false;
  }
  std::string_view rest = u.substr(colon);
  const size_t dot = rest.find('.');
  std::string_view groups = rest.substr(0, dot);
  while (!groups.empty()) {
    if (groups[0] != ':') return false;
    groups.remove_prefix(1);
    size_t n = 0;
    while (n < groups.size() && n < 2 && IsDigit(groups[n])) ++n;
    if (n == 0 || (n == 2 && groups[0] > '5')) return false;
    groups.remove_prefix(n);
  }
  if (dot != std::string_view::npos) {
    for (char c : rest.substr(dot + 1)) {
      if (!IsDigit(c) && c != '_') return false;
    }
  }
  return true;
}

bool IsInt11(std::string_view s) {
  std::string_view u = StripSign(s);
  if (u.empty()) return false;
  const auto digits_ = [](std::string_view t, bool (*ok)(char)) {
    if (t.empty()) return false;
    for (char c : t) {
      if (!ok(c) && c != '_') return false;
    }
    return true;
  };
  if (u.substr(0, 2) == "0b") return digits_(u.substr(2), [](char c) { return c == '0' || c == '1'; });
  if (u.substr(0, 2) == "0x") return digits_(u.substr(2), IsHex);
  if (u == "0") return true;
  if (u[0] == '0') return digits_(u.substr(1), [](char c) { return c >= '0' && c <= '7'; });
  if (u[0] >= '1' && u[0] <= '9') return digits_(u, IsDigit) || IsSexagesimal11(s);
  return false;
}

// PyYAML's float: [-+]?([0-9][0-9_]*)\.[0-9_]*([eE][-+][0-9]+)?, \.[0-9][0-9_]*(...)?,
// sexagesimal with a fraction, .inf, .nan.
bool IsFloat11(std::string_view s) {
  if (OneOf(s, {".nan", ".NaN", ".NAN"})) return true;
  std::string_view u = StripSign(s);
  if (OneOf(u, {".inf", ".Inf", ".INF"})) return true;
  if (IsSexagesimal11(s) && u.find('.') != std::string_view::npos) return true;
  size_t i = 0, int_digits = 0;
  while (i < u.size() && (IsDigit(u[i]) || (int_digits > 0 && u[i] == '_'))) ++i, ++int_digits;
  if (i >= u.size() || u[i] != '.') return false;
  ++i;
  size_t frac = 0;
  while (i < u.size() && (IsDigit(u[i]) || (frac > 0 && u[i] == '_'))) ++i, ++frac;
  if (int_digits == 0 && frac == 0) return false;
  if (i < u.size() && (u[i] == 'e' || u[i] == 'E')) {
    ++i;
    if (i >= u.size() || (u[i] != '-' && u[i] != '+')) return false;
    ++i;
    size_t e = 0;
    while (i < u.size() && IsDigit(u[i])) ++i, ++e;
    if (e == 0) return false;
  }
  return i == u.size();
}

}  // namespace

ScalarType PlainType12(std::string_view s) {
  if (IsNull(s)) return ScalarType::kNull;
  if (ParseBool12(s)) return ScalarType::kBool;
  std::string_view u = StripSign(s);
  if (AllOf(u, IsDigit)) return ScalarType::kInt;
  if (s.size() > 2 && s.substr(0, 2) == "0o" && AllOf(s.substr(2), [](char c) {
        return c >= '0' && c <= '7';
      })) {
    return ScalarType::kInt;
  }
  if (s.size() > 2 && s.substr(0, 2) == "0x" && AllOf(s.substr(2), IsHex)) return ScalarType::kInt;
  if (IsFloat12(s)) return ScalarType::kFloat;
  return ScalarType::kString;
}

ScalarType PlainType11(std::string_view s) {
  if (IsNull(s)) return ScalarType::kNull;
  if (OneOf(s, {"yes", "Yes", "YES", "no", "No", "NO", "true", "True", "TRUE", "false",
                "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF"})) {
    return ScalarType::kBool;
  }
  if (IsInt11(s)) return ScalarType::kInt;
  if (IsFloat11(s)) return ScalarType::kFloat;
  return ScalarType::kString;
}

std::optional<bool> ParseBool12(std::string_view s) {
  if (OneOf(s, {"true", "True", "TRUE"})) return true;
  if (OneOf(s, {"false", "False", "FALSE"})) return false;
  return std::nullopt;
}

IntStatus ParseIdlInteger(std::string_view s, int64_t* value) {
  if (s.size() > 2 && s[0] == '0' && s[1] == 'x') {
    std::string_view h = s.substr(2);
    if (!AllOf(h, IsHex)) return IntStatus::kNotInteger;
    uint64_t v = 0;
    for (char c : h) {
      const int d = IsDigit(c) ? c - '0' : (std::tolower(static_cast<unsigned char>(c)) - 'a' + 10);
      if (v > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) >> 4)) {
        return IntStatus::kOutOfRange;
      }
      v = (v << 4) | static_cast<uint64_t>(d);
    }
    *value = static_cast<int64_t>(v);
    return IntStatus::kOk;
  }
  const bool negative = !s.empty() && s[0] == '-';
  std::string_view u = StripSign(s);
  if (!AllOf(u, IsDigit) || (u.size() > 1 && u[0] == '0')) return IntStatus::kNotInteger;
  uint64_t v = 0;
  const uint64_t limit =
      static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + (negative ? 1 : 0);
  for (char c : u) {
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (limit - d) / 10) return IntStatus::kOutOfRange;
    v = v * 10 + d;
  }
  *value = negative ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
  return IntStatus::kOk;
}

std::string IntegerHint(std::string_view s) {
  std::string_view u = StripSign(s);
  const std::string text(s);
  if (u.size() > 1 && u[0] == '0' && AllOf(u, IsDigit)) {
    std::string trimmed(u.substr(u.find_first_not_of('0') == std::string_view::npos
                                     ? u.size() - 1
                                     : u.find_first_not_of('0')));
    if (s[0] == '-') trimmed = "-" + trimmed;
    if (AllOf(u, [](char c) { return c >= '0' && c <= '7'; })) {
      return "a leading zero: YAML 1.1 reads '" + text + "' as an octal number, YAML 1.2 as "
             "decimal; write " + trimmed + " (decimal) or use 0x hex";
    }
    return "a leading zero is not allowed; write " + trimmed;
  }
  if (u.substr(0, 2) == "0o" || u.substr(0, 2) == "0O") {
    return "octal integers (0o) are not supported; write decimal or 0x hex";
  }
  if (u.substr(0, 2) == "0b" || u.substr(0, 2) == "0B") {
    return "binary integers (0b) are not supported; write decimal or 0x hex";
  }
  if (u.substr(0, 2) == "0X") return "write the hex prefix in lower case: 0x" + std::string(u.substr(2));
  if (s[0] == '-' && u.substr(0, 2) == "0x") return "hex integers cannot have a sign; write decimal";
  if (IsSexagesimal11(s)) {
    return "YAML 1.1 reads '" + text + "' as a base-60 number and YAML 1.2 as a string; write "
           "the integer in decimal or 0x hex";
  }
  if (u.find('_') != std::string_view::npos && IsInt11(s)) {
    std::string plain;
    for (char c : s) {
      if (c != '_') plain += c;
    }
    return "digit separators (_) are not supported; write " + plain;
  }
  if (IsFloat12(s) || IsFloat11(s)) {
    if (s.find_first_of("eE") != std::string_view::npos) {
      return "exponent notation is a floating-point number in YAML; write the integer out";
    }
    return "a floating-point number; write an integer";
  }
  return "";
}

std::string DescribePlain(std::string_view s) {
  const std::string q = "'" + std::string(s) + "'";
  switch (PlainType12(s)) {
    case ScalarType::kNull:
      return s.empty() ? "null (empty value)" : "null (" + q + ")";
    case ScalarType::kBool:
      return "boolean " + std::string(s);
    case ScalarType::kInt:
      return "integer " + std::string(s);
    case ScalarType::kFloat:
      return "number " + std::string(s);
    case ScalarType::kString:
      break;
  }
  switch (PlainType11(s)) {
    case ScalarType::kBool:
      return q + " (a boolean in YAML 1.1)";
    case ScalarType::kInt:
      return q + " (an integer in YAML 1.1)";
    case ScalarType::kFloat:
      return q + " (a number in YAML 1.1)";
    default:
      return "string " + q;
  }
}

}  // namespace naarpc::idl::internal
