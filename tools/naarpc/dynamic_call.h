// Calling a routine known only from its IDL at run time: the same region
// layout, length headers and checks as a generated stub
// (codegen/templates), without generated code. Streams are produced from and
// collected into memory.
#ifndef NAARPC_TOOLS_NAARPC_DYNAMIC_CALL_H_
#define NAARPC_TOOLS_NAARPC_DYNAMIC_CALL_H_

#include <map>
#include <span>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idl/ir.h"
#include "naarpc/client_session.h"
#include "naarpc/stats_registry.h"
#include "naarpc/deadline.h"
#include "naarpc/region_layout.h"
#include "naarpc/status.h"
#include "naarpc/transport.h"
#include "tools/naarpc/values.h"

namespace naarpc::cli {

// The regions of `routine`, in the order its generated stub declares them:
// parameters, then internal regions.
std::vector<RegionSpec> RegionsOf(const idl::Routine& routine);

// The IDL name of an NAA status: the runtime's 0x01..0x05, the service's
// application errors, "OK" for 0; empty if unknown.
std::string StatusName(const idl::Service& service, uint8_t status);

// One parameter's elements in memory the caller owns (raw host-order bytes):
// what Invoke sends from, and where an output lies after a call.
struct ValueView {
  uint64_t count = 0;                // elements
  std::span<const std::byte> data;  // count * element size bytes
};

// One connection (a ClientSession) for one routine. Not thread-safe.
class DynamicCall {
 public:
  // Calls are recorded in `stats` (side "host", routine "Service.Routine",
  // peer "host:port"), as the generated clients record theirs; nullptr:
  // not recorded.
  static Result<std::unique_ptr<DynamicCall>> Open(
      Transport& transport, const std::string& host, uint16_t port, const idl::Service& service,
      const idl::Routine& routine, const ClientOptions& options, Deadline deadline,
      std::shared_ptr<StatsRegistry> stats = StatsRegistry::Default());

  // Runs the routine. `inputs` holds a value for every input (in, inout)
  // parameter, by name; on success `outputs` gets every output (out, inout)
  // parameter (nullptr: they stay in the session's buffers, uncopied). A
  // non-zero NAA status is kNaaError whose message names the
  // status by its IDL name ("Math.Divide: NAA status 0x11 DIVISION_BY_ZERO").
  // Missing, unknown or mis-sized inputs are kInvalidArgument; nothing is
  // sent then.
  Status Invoke(const std::map<std::string, Value>& inputs, std::map<std::string, Value>* outputs,
                Deadline deadline);

  // The same from memory the caller owns (the Python module's numpy arrays):
  // each input is copied once into the session's registered buffer, or not
  // at all if it already is that buffer (session().buffer(index) at the
  // parameter's data offset). Outputs stay in the session's buffers (read
  // them with Output()); output streams, which have no buffer, are collected
  // into `stream_outputs` (if not null).
  Status Invoke(const std::map<std::string, ValueView>& inputs,
                std::map<std::string, Value>* stream_outputs, Deadline deadline);

  // The same with the streams bound by the caller (the Python module's
  // iterables, files and iterators): `streams` produces every input stream
  // and consumes every output stream, numbered as the session numbers them
  // (Param::stream->index; codegen::StreamBindings binds typed sources and
  // sinks). `inputs` then holds no stream parameter.
  Status Invoke(const std::map<std::string, ValueView>& inputs, StreamHandler& streams,
                Deadline deadline);

  // Invoke() (the ValueView form, routines without streams) in two halves,
  // for a caller that waits in slices (the Python module checks for Ctrl-C
  // between them): Start() checks and copies the inputs as Invoke does and
  // posts the call (ClientSession::StartCall; an error means none is in
  // flight). Continue() advances it whenever session().notify_fd() is
  // readable or a slice has passed: nullopt while it is in flight, else its
  // status as Invoke returns it. Abandon() ends it (kCancelled; the session
  // is then in ERROR, its connection closed).
  Status Start(const std::map<std::string, ValueView>& inputs, Deadline deadline);
  std::optional<Status> Continue();
  // Continue() that blocks on the connection up to `until` (ClientSession::
  // WaitCall): std::nullopt while the call is still in flight.
  std::optional<Status> Wait(Deadline until);
  void Abandon();

  // After a successful Invoke: the elements of output parameter `param` (not
  // a stream) in the session's buffer, valid until the next Invoke. A
  // variable-length output's count is its length header, checked against
  // its maximum (kProtocolError beyond).
  Result<ValueView> Output(const idl::Param& param);

  // Bytes written to the NAA by the last Invoke (for throughput figures).
  uint64_t last_bytes_sent() const { return last_bytes_sent_; }
  uint64_t last_bytes_received() const { return last_bytes_received_; }
  ClientSession& session() { return *session_; }
  const std::string& full_name() const { return name_; }
  // The session's results are opened by per-call memory windows (the MRSP
  // negotiated them: a session that asked and was refused does not open).
  bool memory_windows() const { return memory_windows_; }

 private:
  // `memory` (the in-memory form) or `external` streams.
  // `start_only`: posts the call (Start) instead of running it.
  Status InvokeWith(const std::map<std::string, ValueView>& inputs, StreamHandler* external,
                    std::map<std::string, Value>* stream_outputs, Deadline deadline,
                    bool start_only);
  // A finished call's status, annotated with the routine and error names;
  // on success, the outputs' length headers checked.
  Status Complete(const Status& status);
  // The statistics of the call being made (if any are kept).
  void BeginObserved();
  void EndObserved(const Status& status);

  DynamicCall(const idl::Service& service, const idl::Routine& routine,
              std::unique_ptr<ClientSession> session, std::shared_ptr<StatsRegistry> registry,
              const std::string& peer)
      : service_(service),
        routine_(routine),
        name_(service.name + "." + routine.name),
        session_(std::move(session)),
        registry_(std::move(registry)),
        stats_(registry_ != nullptr ? &registry_->Get(CallSide::kHost, name_, peer) : nullptr) {}

  const idl::Service& service_;
  const idl::Routine& routine_;
  const std::string name_;
  std::unique_ptr<ClientSession> session_;
  const std::shared_ptr<StatsRegistry> registry_;
  RoutineStats* const stats_;  // in registry_; nullptr: none kept
  bool observed_ = false;      // a call is recorded as started in stats_
  int64_t observed_start_ns_ = 0;
  uint64_t last_bytes_sent_ = 0;
  uint64_t last_bytes_received_ = 0;
  bool memory_windows_ = false;
  std::vector<uint64_t> started_send_lengths_;
};

}  // namespace naarpc::cli

#endif  // NAARPC_TOOLS_NAARPC_DYNAMIC_CALL_H_
