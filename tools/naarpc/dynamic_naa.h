// A software NAA for any IDL file, without generated code: it checks each
// call's regions as a generated skeleton does (count, sizes, directions,
// reference-dialect flags, length headers; 0x04 otherwise) and runs a
// built-in test kernel per routine.
#ifndef NAARPC_TOOLS_NAARPC_DYNAMIC_NAA_H_
#define NAARPC_TOOLS_NAARPC_DYNAMIC_NAA_H_

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "idl/ir.h"
#include "naarpc/impl/routine.h"
#include "naarpc/naa_server.h"
#include "naarpc/status.h"

namespace naarpc::cli {

// Built-in kernels. Each output parameter takes its data from a "source"
// input: an inout parameter from itself, the k-th out parameter from the
// k-th input in IDL order (cycling). Bytes are copied raw, cut to the
// output's capacity (a variable output gets as many whole elements as fit,
// at most its maximum); the rest of a fixed output is zero. Streams: input
// streams are read whole into memory first; an output stream takes the next
// input stream (cycling; without input streams, the next input) and ends.
struct Kernel {
  enum class Kind { kEcho, kIncrement, kZeros, kSleep, kFail };
  Kind kind = Kind::kEcho;
  std::chrono::milliseconds sleep{0};  // kSleep: then echo
  uint8_t status = 0;                  // kFail
};

// "echo", "increment" (echo, then +1 on every element, by type), "zeros",
// "sleep:MS", "fail:CODE" (0x01..0x7f, decimal or 0x, or an error name of
// `service`).
Result<Kernel> ParseKernel(std::string_view spec, const idl::Service& service);

// A kernel the program supplies (the Python module's `serve`), run on the
// regions of a call that passed the layout checks.
struct KernelArgs {
  NaaCall* call = nullptr;
  const idl::Service* service = nullptr;
  const idl::Routine* routine = nullptr;
  // Per parameter, in IDL order: an input's elements as sent (an inout's in
  // place, in its region); an output's whole capacity (its maximum for a
  // variable-length one).
  std::vector<std::span<std::byte>> data;
  // Per parameter: elements. Inputs: as sent. A variable-length output: what
  // the kernel returns (it may change it; default: the count of the
  // routine's first variable-length input, at most the output's maximum, or
  // the maximum if there is none; an inout keeps its input's count).
  std::vector<uint64_t> counts;
  // Per parameter: a stream parameter's stream (its data and count are
  // empty), checked against the IDL's chunk size and window; null for the
  // others. The kernel reads or writes it while it runs (e.g. through
  // codegen::StreamReader / StreamWriter, and fails the call as a generated
  // skeleton does when a stream reports an error).
  std::vector<NaaStream*> streams;
};
// Returns the NAA status (0 = success); may set call->failure_detail.
using KernelFunction = std::function<uint8_t(KernelArgs&)>;

class DynamicNaa final : public NaaHandler {
 public:
  // Serves every routine of `services` (function codes must be distinct
  // across them). `kernel_specs`: "KERNEL" for every routine, or
  // "Routine=KERNEL" / "Service.Routine=KERNEL"; later entries win; the
  // default is echo. Errors name the unknown routine or the bad kernel.
  static Result<std::unique_ptr<DynamicNaa>> Create(std::vector<const idl::Service*> services,
                                                    const std::vector<std::string>& kernel_specs);

  uint8_t Handle(NaaCall& call) override;
  std::chrono::milliseconds KernelTimeout(uint8_t function_code) const override;
  std::string_view RoutineName(uint8_t function_code) const override;

  // Runs `fn` for `routine` ("Routine" or "Service.Routine"); `label` is
  // what Describe() shows. Stream parameters reach it as
  // KernelArgs::streams.
  Status SetKernel(std::string_view routine, KernelFunction fn, std::string label);

  // One line per routine: "Service.Routine (code N): KERNEL".
  std::string Describe() const;
  uint64_t calls() const { return calls_.load(); }

 private:
  struct Entry {
    const idl::Service* service = nullptr;
    const idl::Routine* routine = nullptr;
    Kernel kernel;
    std::string kernel_spec;
    std::shared_ptr<const KernelFunction> function;  // set: runs instead of `kernel`
    std::string name;  // "Service.Routine"
    // The routine as a generated skeleton describes it (its layout check).
    std::vector<codegen::ParamDesc> params;
    std::vector<codegen::InternalDesc> internals;
  };
  uint8_t RunFunction(const Entry& e, NaaCall& call, const std::vector<uint64_t>& counts,
                      const std::vector<std::span<const std::byte>>& in_data);
  DynamicNaa() = default;
  uint8_t Run(const Entry& e, NaaCall& call);

  std::array<Entry, 128> by_code_{};
  std::vector<uint8_t> codes_;
  std::atomic<uint64_t> calls_{0};
};

}  // namespace naarpc::cli

#endif  // NAARPC_TOOLS_NAARPC_DYNAMIC_NAA_H_
