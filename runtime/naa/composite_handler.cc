// CompositeHandler: several generated services behind one NaaServer, each
// call dispatched by its function code (naarpc/impl/codegen_support.h).
#include <string>

#include "naarpc/impl/codegen_support.h"

namespace naarpc::codegen {

Result<std::unique_ptr<CompositeHandler>> CompositeHandler::Create(
    std::vector<ServiceHandler*> services) {
  std::unique_ptr<CompositeHandler> h(new CompositeHandler());
  for (ServiceHandler* s : services) {
    if (s == nullptr) return InvalidArgumentError("CompositeHandler: null service");
    for (uint8_t code : s->function_codes()) {
      if (code > kMaxFunctionCode) {
        return InvalidArgumentError("CompositeHandler: bad function code " +
                                    std::to_string(code));
      }
      if (h->by_code_[code] != nullptr) {
        return InvalidArgumentError(
            "CompositeHandler: function code " + std::to_string(code) + " is served by both " +
            std::string(h->by_code_[code]->service_name()) + " and " +
            std::string(s->service_name()) +
            " (function codes must be distinct across services on one server)");
      }
      h->by_code_[code] = s;
    }
  }
  return h;
}

uint8_t CompositeHandler::Handle(NaaCall& call) {
  ServiceHandler* s = call.function_code <= kMaxFunctionCode ? by_code_[call.function_code]
                                                             : nullptr;
  return s == nullptr ? kNaaStatusUnknownFunction : s->Handle(call);
}

std::chrono::milliseconds CompositeHandler::KernelTimeout(uint8_t function_code) const {
  ServiceHandler* s = function_code <= kMaxFunctionCode ? by_code_[function_code] : nullptr;
  return s == nullptr ? std::chrono::milliseconds::zero() : s->KernelTimeout(function_code);
}

std::string_view CompositeHandler::RoutineName(uint8_t function_code) const {
  ServiceHandler* s = function_code <= kMaxFunctionCode ? by_code_[function_code] : nullptr;
  return s == nullptr ? std::string_view() : s->RoutineName(function_code);
}

}  // namespace naarpc::codegen
