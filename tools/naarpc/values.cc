#include "tools/naarpc/values.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

namespace naarpc::cli {
namespace {

using idl::ElementType;

std::string ParamName(const idl::Param& p) { return "parameter '" + p.name + "'"; }

uint32_t ElementSize(const idl::Param& p) { return idl::Describe(p.type).size; }

std::string TypeName(const idl::Param& p) { return std::string(idl::Describe(p.type).idl); }

// The element count a value of `p` may have: exactly `count` (fixed) or
// 0..count (variable).
// A stream takes any number of elements, held in memory here (1 GiB at most).
constexpr uint64_t kMaxStreamBytes = uint64_t{1} << 30;

Status CheckCount(const idl::Param& p, uint64_t n) {
  if (StreamOf(p)) {
    if (n > kMaxStreamBytes / ElementSize(p)) {  // n * size could wrap
      return InvalidArgumentError(ParamName(p) + ": " + std::to_string(n) + " " + TypeName(p) +
                                  " elements; naarpc call holds a stream in memory, 1 GiB at most");
    }
    return Status::Ok();
  }
  if (p.layout) {  // the packed elements, or the caller's memory the layout reaches
    uint64_t reach = 0;
    for (uint64_t r : p.layout->reach) reach += r;
    if (n == p.count || n == reach) return Status::Ok();
    return InvalidArgumentError(ParamName(p) + ": expected the caller's memory, " +
                                std::to_string(reach) + " " + TypeName(p) +
                                " elements (its layout reaches them), or the packed " +
                                std::to_string(p.count) + ", got " + std::to_string(n));
  }
  if (p.variable ? n > p.count : n != p.count) {
    return InvalidArgumentError(
        ParamName(p) + ": expected " +
        (p.variable ? "at most " + std::to_string(p.count) : std::to_string(p.count)) + " " +
        TypeName(p) + " element(s), got " + std::to_string(n));
  }
  return Status::Ok();
}

bool IsFloat(ElementType t) { return t == ElementType::kF32 || t == ElementType::kF64; }
bool IsSigned(ElementType t) {
  return t == ElementType::kI8 || t == ElementType::kI16 || t == ElementType::kI32 ||
         t == ElementType::kI64;
}

// Range of an integer type as (min, max) in int128-free form.
struct IntRange {
  int64_t min;
  uint64_t max;
};
IntRange RangeOf(ElementType t) {
  switch (t) {
    case ElementType::kU8:
    case ElementType::kBytes:
      return {0, 0xff};
    case ElementType::kU16:
      return {0, 0xffff};
    case ElementType::kU32:
      return {0, 0xffffffffu};
    case ElementType::kU64:
      return {0, std::numeric_limits<uint64_t>::max()};
    case ElementType::kI8:
      return {-128, 127};
    case ElementType::kI16:
      return {-32768, 32767};
    case ElementType::kI32:
      return {std::numeric_limits<int32_t>::min(), 0x7fffffff};
    case ElementType::kI64:
      return {std::numeric_limits<int64_t>::min(),
              static_cast<uint64_t>(std::numeric_limits<int64_t>::max())};
    default:
      return {0, 0};
  }
}

void Store(std::byte* out, const void* v, size_t n) { std::memcpy(out, v, n); }

// Stores integer bits (two's complement) of width `size` little-endian.
void StoreInt(std::byte* out, uint64_t bits, uint32_t size) {
  for (uint32_t i = 0; i < size; ++i) out[i] = static_cast<std::byte>(bits >> (8 * i));
}

uint64_t LoadUint(const std::byte* in, uint32_t size) {
  uint64_t v = 0;
  for (uint32_t i = 0; i < size; ++i) v |= uint64_t(std::to_integer<uint8_t>(in[i])) << (8 * i);
  return v;
}

int64_t LoadInt(const std::byte* in, uint32_t size) {
  uint64_t v = LoadUint(in, size);
  if (size < 8 && (v >> (8 * size - 1)) & 1) v |= ~uint64_t{0} << (8 * size);
  return static_cast<int64_t>(v);
}

std::string RangeText(const idl::Param& p) {
  const IntRange r = RangeOf(p.type);
  return TypeName(p) + " (" + std::to_string(r.min) + ".." + std::to_string(r.max) + ")";
}

// A JSON number's text as written: nlohmann reads an integer beyond 64 bits
// as a double and refuses one beyond f64, so messages quote the token.
class NumberTokens : public nlohmann::json_sax<nlohmann::json> {
 public:
  // Float tokens of the top-level array's elements (or of a bare number: 0).
  std::map<size_t, std::string> floats;
  // A number beyond f64 (nlohmann's error 406): its token, and its element
  // (nullopt: inside a nested array or an object).
  std::optional<std::pair<std::optional<size_t>, std::string>> overflow;

  bool null() override { return Scalar(); }
  bool boolean(bool) override { return Scalar(); }
  bool number_integer(number_integer_t) override { return Scalar(); }
  bool number_unsigned(number_unsigned_t) override { return Scalar(); }
  bool number_float(number_float_t, const string_t& s) override {
    if (depth_ == 0 || (depth_ == 1 && array_)) floats[index_] = s;
    return Scalar();
  }
  bool string(string_t&) override { return Scalar(); }
  bool binary(binary_t&) override { return Scalar(); }
  bool start_object(std::size_t) override { return Open(false); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(true); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string& token,
                   const nlohmann::detail::exception& e) override {
    if (e.id == 406) {
      overflow.emplace(depth_ == 0 || (depth_ == 1 && array_) ? std::optional(index_)
                                                              : std::nullopt,
                       token);
    }
    return false;
  }

 private:
  bool Scalar() {
    if (depth_ == 1) ++index_;
    return true;
  }
  bool Open(bool array) {
    if (depth_ == 0) array_ = array;
    ++depth_;
    return true;
  }
  bool Close() {
    --depth_;
    return Scalar();
  }
  size_t depth_ = 0, index_ = 0;
  bool array_ = false;  // the top level is an array
};

// An integer literal (digits, maybe a '-'): nlohmann's double for one means
// it is beyond 64 bits.
bool IsIntegerToken(const std::string& t) {
  const size_t start = !t.empty() && t[0] == '-' ? 1 : 0;
  return t.size() > start &&
         std::all_of(t.begin() + start, t.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// `token`: the element's text if it is a float token ("" otherwise).
Status StoreJsonElement(const idl::Param& p, const nlohmann::json& j, size_t index,
                        const std::string& token, std::byte* out) {
  auto where = [&] { return ParamName(p) + "[" + std::to_string(index) + "]"; };
  if (IsFloat(p.type) && j.is_string()) {
    const std::string t = j.get<std::string>();
    double d;
    if (t == "NaN") {
      d = std::numeric_limits<double>::quiet_NaN();
    } else if (t == "Infinity") {
      d = std::numeric_limits<double>::infinity();
    } else if (t == "-Infinity") {
      d = -std::numeric_limits<double>::infinity();
    } else {
      return InvalidArgumentError(where() + ": expected a number (" + TypeName(p) +
                                  ", or \"NaN\", \"Infinity\", \"-Infinity\"), got " + j.dump());
    }
    if (p.type == ElementType::kF32) {
      const float f = static_cast<float>(d);
      Store(out, &f, sizeof f);
    } else {
      Store(out, &d, sizeof d);
    }
    return Status::Ok();
  }
  if (IsFloat(p.type)) {
    if (!j.is_number()) {
      return InvalidArgumentError(where() + ": expected a number (" + TypeName(p) + "), got " +
                                  j.dump());
    }
    double d = j.get<double>();
    if (p.type == ElementType::kF32) {
      float f = static_cast<float>(d);
      if (std::isfinite(d) && !std::isfinite(f)) {
        return InvalidArgumentError(where() + ": " + (token.empty() ? j.dump() : token) +
                                    " is out of the range of f32");
      }
      Store(out, &f, sizeof f);
    } else {
      Store(out, &d, sizeof d);
    }
    return Status::Ok();
  }
  const IntRange r = RangeOf(p.type);
  if (j.is_number_float() && IsIntegerToken(token)) {  // beyond 64 bits
    return InvalidArgumentError(where() + ": " + token + " is out of the range of " +
                                RangeText(p));
  }
  if (j.is_number_unsigned()) {
    uint64_t v = j.get<uint64_t>();
    if (v > r.max) {
      return InvalidArgumentError(where() + ": " + j.dump() + " is out of the range of " +
                                  RangeText(p));
    }
    StoreInt(out, v, ElementSize(p));
    return Status::Ok();
  }
  if (j.is_number_integer()) {
    int64_t v = j.get<int64_t>();
    if (v < r.min || (v >= 0 && static_cast<uint64_t>(v) > r.max)) {
      return InvalidArgumentError(where() + ": " + j.dump() + " is out of the range of " +
                                  RangeText(p));
    }
    StoreInt(out, static_cast<uint64_t>(v), ElementSize(p));
    return Status::Ok();
  }
  return InvalidArgumentError(where() + ": expected an integer (" + TypeName(p) + "), got " +
                              j.dump());
}

Result<Value> FromJson(const idl::Param& p, std::string_view text) {
  NumberTokens tokens;
  if (!nlohmann::json::sax_parse(text, &tokens) && tokens.overflow) {
    const auto& [index, token] = *tokens.overflow;
    return InvalidArgumentError(ParamName(p) + (index ? "[" + std::to_string(*index) + "]" : "") +
                                ": " + token +
                                " is out of the range of " +
                                (IsFloat(p.type) ? TypeName(p) : RangeText(p)));
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return InvalidArgumentError(ParamName(p) + ": not valid JSON: " +
                                std::string(text.substr(0, 80)) + (text.size() > 80 ? "..." : ""));
  }
  if (!j.is_array()) {
    if (!j.is_number()) {
      return InvalidArgumentError(ParamName(p) + ": expected a JSON array of " + TypeName(p) +
                                  ", got " + j.dump());
    }
    j = nlohmann::json::array({j});
  }
  NAARPC_RETURN_IF_ERROR(CheckCount(p, j.size()));
  Value v;
  v.count = j.size();
  v.data.resize(v.count * ElementSize(p));
  for (size_t i = 0; i < j.size(); ++i) {
    auto token = tokens.floats.find(i);
    NAARPC_RETURN_IF_ERROR(StoreJsonElement(p, j[i], i,
                                            token == tokens.floats.end() ? "" : token->second,
                                            v.data.data() + i * ElementSize(p)));
  }
  return v;
}

Result<Value> FromBytes(const idl::Param& p, std::vector<std::byte> bytes, std::string_view what) {
  const uint32_t size = ElementSize(p);
  if (bytes.size() % size != 0) {
    return InvalidArgumentError(ParamName(p) + ": " + std::string(what) + " has " +
                                std::to_string(bytes.size()) + " bytes, not a multiple of the " +
                                std::to_string(size) + "-byte " + TypeName(p) + " element");
  }
  NAARPC_RETURN_IF_ERROR(
      CheckCount(p, bytes.size() / size)
          .WithContext(std::string(what) + " (" + std::to_string(bytes.size()) + " bytes)"));
  Value v;
  v.count = bytes.size() / size;
  v.data = std::move(bytes);
  return v;
}

Result<Value> FromFile(const idl::Param& p, const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return InvalidArgumentError(ParamName(p) + ": '" + path + "' is not a regular file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return NotFoundError(ParamName(p) + ": cannot open '" + path + "': " + std::strerror(errno));
  }
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0);
  // Checked before reading: a huge file is refused without allocating it.
  const uint64_t limit = StreamOf(p) ? kMaxStreamBytes : p.data_bytes();
  if (size < 0 || static_cast<uint64_t>(size) > limit) {
    return InvalidArgumentError(ParamName(p) + ": file '" + path + "' has " + std::to_string(size) +
                                " bytes; the parameter holds " +
                                (p.variable ? "at most " : "exactly ") + std::to_string(limit) +
                                " (" + std::to_string(p.count) + " x " + TypeName(p) + ")");
  }
  std::vector<std::byte> bytes(static_cast<size_t>(size));
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size)) {
    return InvalidArgumentError(ParamName(p) + ": cannot read '" + path + "'");
  }
  return FromBytes(p, std::move(bytes), "file '" + path + "'");
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<Value> FromHex(const idl::Param& p, std::string_view hex) {
  if (hex.size() % 2 != 0) {
    return InvalidArgumentError(ParamName(p) + ": hex input has an odd number of digits (" +
                                std::to_string(hex.size()) + ")");
  }
  std::vector<std::byte> bytes(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = HexDigit(hex[i]), lo = HexDigit(hex[i + 1]);
    if (hi < 0 || lo < 0) {
      return InvalidArgumentError(ParamName(p) + ": '" + std::string(hex.substr(i, 2)) +
                                  "' at offset " + std::to_string(i) + " is not hex");
    }
    bytes[i / 2] = static_cast<std::byte>(hi * 16 + lo);
  }
  return FromBytes(p, std::move(bytes), "hex input");
}

// The most elements a value of `p` may have.
uint64_t MaxCount(const idl::Param& p) {
  if (StreamOf(p)) return kMaxStreamBytes / ElementSize(p);
  uint64_t reach = 0;
  if (p.layout) {
    for (uint64_t r : p.layout->reach) reach += r;
  }
  return std::max(p.count, reach);
}

// `count_text`: the N of KIND:N (nullopt: no ":N").
Result<Value> Generated(const idl::Param& p, std::string_view kind,
                        std::optional<std::string_view> count_text) {
  uint64_t n = p.count;
  if (count_text) {
    const std::string spec = std::string(kind) + ":" + std::string(*count_text);
    const char* begin = count_text->data();
    const char* end = begin + count_text->size();
    const bool digits = begin != end && std::all_of(begin, end, [](char c) {
      return c >= '0' && c <= '9';
    });
    const auto r = std::from_chars(begin, end, n);
    if (!digits) {
      return InvalidArgumentError(ParamName(p) + ": '" + spec +
                                  "': the element count must be a decimal number");
    }
    if (r.ec == std::errc::result_out_of_range) {  // beyond 64 bits; CheckCount words the rest
      const bool exact = !StreamOf(p) && !p.variable && !p.layout;
      return InvalidArgumentError(
          ParamName(p) + ": '" + spec + "': the element count is too large; it takes " +
          (exact ? "exactly " : "at most ") + std::to_string(MaxCount(p)) + " " + TypeName(p) +
          (StreamOf(p) ? " (naarpc call holds a stream in memory, 1 GiB at most)" : ""));
    }
  } else if (StreamOf(p)) {
    return InvalidArgumentError(ParamName(p) + " is a stream: give its length, e.g. " +
                                std::string(kind) + ":1000");
  }
  NAARPC_RETURN_IF_ERROR(CheckCount(p, n));
  const uint32_t size = ElementSize(p);
  Value v;
  v.count = n;
  v.data.assign(n * size, std::byte{0});
  if (kind == "random") {
    std::mt19937_64 rng(std::hash<std::string>{}(p.name));
    for (uint64_t i = 0; i < n; ++i) {
      std::byte* out = v.data.data() + i * size;
      if (p.type == ElementType::kF32) {
        float f = std::uniform_real_distribution<float>(-1, 1)(rng);
        Store(out, &f, sizeof f);
      } else if (p.type == ElementType::kF64) {
        double d = std::uniform_real_distribution<double>(-1, 1)(rng);
        Store(out, &d, sizeof d);
      } else {
        StoreInt(out, rng(), size);
      }
    }
  } else if (kind == "seq") {
    for (uint64_t i = 0; i < n; ++i) {
      std::byte* out = v.data.data() + i * size;
      if (p.type == ElementType::kF32) {
        float f = static_cast<float>(i);
        Store(out, &f, sizeof f);
      } else if (p.type == ElementType::kF64) {
        double d = static_cast<double>(i);
        Store(out, &d, sizeof d);
      } else {
        StoreInt(out, i, size);
      }
    }
  }
  return v;
}

template <typename F>
F LoadFloat(const std::byte* in) {
  F f;
  std::memcpy(&f, in, sizeof f);
  return f;
}

double AsDouble(const idl::Param& p, const std::byte* in) {
  if (p.type == ElementType::kF32) return LoadFloat<float>(in);
  if (p.type == ElementType::kF64) return LoadFloat<double>(in);
  return IsSigned(p.type) ? static_cast<double>(LoadInt(in, ElementSize(p)))
                          : static_cast<double>(LoadUint(in, ElementSize(p)));
}

nlohmann::json ElementJson(const idl::Param& p, const std::byte* in) {
  if (p.type == ElementType::kF32) return LoadFloat<float>(in);
  if (p.type == ElementType::kF64) return LoadFloat<double>(in);
  if (IsSigned(p.type)) return LoadInt(in, ElementSize(p));
  return LoadUint(in, ElementSize(p));
}

// Shortest text that reads back as the same value.
std::string Number(double d) {
  char buf[32];
  if (d == std::floor(d) && std::fabs(d) < 1e15) {  // integers as integers: 100000, not 1e+05
    std::snprintf(buf, sizeof buf, "%.0f", d);
    return buf;
  }
  auto r = std::to_chars(buf, buf + sizeof buf, d);
  return std::string(buf, r.ptr);
}
std::string Number(float f) {
  char buf[32];
  if (f == std::floor(f) && std::fabs(f) < 1e7f) {
    std::snprintf(buf, sizeof buf, "%.0f", static_cast<double>(f));
    return buf;
  }
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  return std::string(buf, r.ptr);
}

// An element as shortest round-trip text in its own precision.
// JSON has no NaN or infinities: they are the strings "NaN", "Infinity",
// "-Infinity" (as ParseValue reads them).
std::string ElementText(const idl::Param& p, const std::byte* in) {
  if (IsFloat(p.type)) {
    const double d = AsDouble(p, in);
    if (std::isnan(d)) return "\"NaN\"";
    if (std::isinf(d)) return d > 0 ? "\"Infinity\"" : "\"-Infinity\"";
    return p.type == ElementType::kF32 ? Number(static_cast<float>(d)) : Number(d);
  }
  return ElementJson(p, in).dump();
}

}  // namespace

Result<Value> ParseValue(const idl::Param& param, std::string_view spec) {
  if (spec.empty()) {
    return InvalidArgumentError(ParamName(param) +
                                ": empty input; give a JSON array, @FILE, hex:..., zeros, "
                                "random or seq");
  }
  if (spec[0] == '@') return FromFile(param, std::string(spec.substr(1)));
  if (spec.starts_with("hex:")) return FromHex(param, spec.substr(4));
  for (std::string_view kind : {"zeros", "random", "seq"}) {
    if (spec == kind) return Generated(param, kind, std::nullopt);
    if (spec.starts_with(kind) && spec.size() > kind.size() && spec[kind.size()] == ':') {
      return Generated(param, kind, spec.substr(kind.size() + 1));
    }
  }
  return FromJson(param, spec);
}

Result<Format> ParseFormat(std::string_view name) {
  if (name == "auto") return Format::kAuto;
  if (name == "json") return Format::kJson;
  if (name == "hex") return Format::kHex;
  if (name == "summary") return Format::kSummary;
  return InvalidArgumentError("unknown output format '" + std::string(name) +
                              "' (auto, json, hex, summary, or @FILE)");
}

std::string ToJson(const idl::Param& param, const Value& value) {
  const uint32_t size = ElementSize(param);
  std::string out = "[";
  for (uint64_t i = 0; i < value.count; ++i) {
    if (i) out += ", ";
    const std::byte* in = value.data.data() + i * size;
    out += ElementText(param, in);
  }
  return out + "]";
}

std::string ToHex(const Value& value) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(value.data.size() * 2);
  for (std::byte b : value.data) {
    out += kDigits[std::to_integer<uint8_t>(b) >> 4];
    out += kDigits[std::to_integer<uint8_t>(b) & 15];
  }
  return out;
}

std::string Summary(const idl::Param& param, const Value& value) {
  const uint32_t size = ElementSize(param);
  std::string out = std::to_string(value.count) + " x " + TypeName(param);
  if (value.count == 0) return out;
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  for (uint64_t i = 0; i < value.count; ++i) {
    const double d = AsDouble(param, value.data.data() + i * size);
    lo = std::min(lo, d);
    hi = std::max(hi, d);
    sum += d;
  }
  out += ": min " + Number(lo) + ", max " + Number(hi) + ", sum " + Number(sum) + ", first [";
  const uint64_t shown = std::min<uint64_t>(value.count, 8);
  for (uint64_t i = 0; i < shown; ++i) {
    if (i) out += ", ";
    out += ElementText(param, value.data.data() + i * size);
  }
  return out + (value.count > shown ? ", ...]" : "]");
}

std::string FormatValue(const idl::Param& param, const Value& value, Format format) {
  switch (format) {
    case Format::kJson:
      return ToJson(param, value);
    case Format::kHex:
      return ToHex(value);
    case Format::kSummary:
      return Summary(param, value);
    case Format::kAuto:
      break;
  }
  return value.count <= 64 ? ToJson(param, value) : Summary(param, value);
}

Status WriteRaw(const std::string& path, const Value& value) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return NotFoundError("cannot write '" + path + "': " + std::strerror(errno));
  out.write(reinterpret_cast<const char*>(value.data.data()),
            static_cast<std::streamsize>(value.data.size()));
  if (!out.flush()) return InternalError("writing '" + path + "' failed");
  return Status::Ok();
}

}  // namespace naarpc::cli
