#include "idl/ir.h"

#include <algorithm>
#include <iterator>

namespace naarpc::idl {
namespace {

constexpr ElementTypeInfo kTypes[] = {
    {"u8", "uint8_t", 1},  {"u16", "uint16_t", 2}, {"u32", "uint32_t", 4},
    {"u64", "uint64_t", 8}, {"i8", "int8_t", 1},   {"i16", "int16_t", 2},
    {"i32", "int32_t", 4}, {"i64", "int64_t", 8},  {"f32", "float", 4},
    {"f64", "double", 8},  {"bytes", "std::byte", 1},
};

}  // namespace

const ElementTypeInfo& Describe(ElementType type) {
  return kTypes[static_cast<size_t>(type)];
}

std::optional<ElementType> ParseElementType(std::string_view idl_name) {
  for (size_t i = 0; i < std::size(kTypes); ++i) {
    if (kTypes[i].idl == idl_name) return static_cast<ElementType>(i);
  }
  return std::nullopt;
}

std::string_view DirectionName(Direction d) {
  switch (d) {
    case Direction::kIn:
      return "in";
    case Direction::kOut:
      return "out";
    case Direction::kInOut:
      return "inout";
  }
  return "?";
}

uint8_t Param::expected_flags() const {
  if (stream) return direction == Direction::kIn ? 0x15 : 0x19;
  uint8_t f = 0;
  if (is_input()) f |= 0x04;
  if (is_output()) f |= 0x08;
  if (single_send) f |= 0x02;
  return f;
}

bool Routine::has_variable() const {
  return std::any_of(params.begin(), params.end(), [](const Param& p) { return p.variable; });
}

size_t Routine::stream_count() const {
  return static_cast<size_t>(
      std::count_if(params.begin(), params.end(), [](const Param& p) { return p.is_stream(); }));
}

uint64_t Routine::total_bytes() const {
  uint64_t total = 0;
  for (const Param& p : params) total += p.region_bytes();
  for (const Internal& i : internals) total += i.region_bytes();
  return total;
}

const Param* Routine::FindParam(std::string_view param_name) const {
  for (const Param& p : params) {
    if (p.name == param_name) return &p;
  }
  return nullptr;
}

const Routine* Service::FindRoutine(std::string_view routine_name) const {
  for (const Routine& r : routines) {
    if (r.name == routine_name) return &r;
  }
  return nullptr;
}

const Routine* Service::FindRoutineByCode(uint8_t function_code) const {
  for (const Routine& r : routines) {
    if (r.code == function_code) return &r;
  }
  return nullptr;
}

const Service* IdlFile::FindService(std::string_view service_name) const {
  for (const Service& s : services) {
    if (s.name == service_name) return &s;
  }
  return nullptr;
}

}  // namespace naarpc::idl
