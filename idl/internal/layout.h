// `layout:` of a parameter (docs/idl.md "Layouts", seed 004): read, checked
// with naarpc::CheckLayout's rules and reported at the offending field.
#ifndef NAARPC_IDL_INTERNAL_LAYOUT_H_
#define NAARPC_IDL_INTERNAL_LAYOUT_H_

#include <cstdint>
#include <optional>

#include "idl/internal/schema.h"
#include "idl/ir.h"

namespace naarpc::idl::internal {

// Reads p's `layout` (REQUIRES: present) into prm.layout if it is valid and
// fits the parameter: a fixed `size` (`size` = the checked element count,
// nullopt if absent or invalid) of at least 2 elements, not a stream, and
// as many elements as the size.
void ReadLayout(Object& p, Param& prm, std::optional<uint64_t> size, Sink& sink);

}  // namespace naarpc::idl::internal

#endif  // NAARPC_IDL_INTERNAL_LAYOUT_H_
