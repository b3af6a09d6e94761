// ClientSession: the host side of one NAA connection. Open() connects,
// registers one memory region per parameter, and runs the MRSP once; Call()
// then runs any number of RPCs over the same connection and regions:
//   n-1 RDMA WRITEs + one WRITE_WITH_IMM (function code) -> NAA computes ->
//   the NAA writes the return region(s) back, the last write carrying the
//   status immediate.
// One call is in flight per session; a session is used by one thread at a
// time. For concurrency open several sessions.
#ifndef NAARPC_CLIENT_SESSION_H_
#define NAARPC_CLIENT_SESSION_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "naarpc/comm_state.h"
#include "naarpc/deadline.h"
#include "naarpc/protocol.h"
#include "naarpc/region_layout.h"
#include "naarpc/status.h"
#include "naarpc/stream.h"
#include "naarpc/strided_view.h"
#include "naarpc/transport.h"
#include "naarpc/user_memory.h"

namespace naarpc {

struct ClientOptions {
  Dialect dialect = Dialect::kSpec;
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds mrsp_timeout{10'000};
  // Largest wire region; larger parameters are split into several regions.
  // Only tests lower it.
  uint64_t max_region_size = kMaxRegionSize;
  // Spec dialect: the metadata region's bytes never change within a
  // session, and a plain RDMA WRITE is invisible to the NAA, so by default it
  // is written on the first call only (the NAA keeps its regions between
  // calls), saving one WRITE per call. true rewrites it with every call, as
  // the spec's naaice_write_data does, for an NAA that reuses region 0.
  bool metadata_every_call = false;
  // Connecting retries while the NAA refuses (still starting up), within
  // connect_timeout (ConnectOptions::retry_refused). A channel of several
  // NAAs turns it off: a refusing NAA fails the attempt at once, and the
  // call moves on to another NAA.
  bool retry_refused_connect = true;
  // Spec dialect: the NAA may write the result regions only while a call
  // runs (docs/protocol.md 4.5). They are registered without remote access
  // and opened through type-2 memory windows, bound before each call's
  // writes and invalidated when it ends (result, error, timeout or
  // abandonment) before control returns; each call's window keys reach the
  // NAA in the metadata region. Negotiated at MRSP (capability 0x01): a
  // session to an NAA that does not accept it, over a device without type-2
  // windows, or with streams fails to open (kFailedPrecondition /
  // kInvalidArgument) rather than fall back to connection-long keys.
  // Unset: off for a session opened here; generated clients, the CLI and
  // Python use the routine's IDL declaration (docs/idl.md `memory_windows`).
  // A value set here wins over the IDL, either way.
  std::optional<bool> memory_windows;
  // Zero-copy sends of laid-out inputs (docs/protocol.md 16.2,
  // naarpc/user_memory.h): caller memory registered here is sent by gather
  // lists, without packing, when the layout's runs average at least
  // zero_copy_min_run_bytes; smaller runs cost the device more per entry
  // than the CPU's copy (bench/README.md "layout_bench"). nullptr: always
  // pack.
  static constexpr uint64_t kDefaultZeroCopyMinRunBytes = 4096;
  std::shared_ptr<UserMemoryRegistry> user_memory;
  uint64_t zero_copy_min_run_bytes = kDefaultZeroCopyMinRunBytes;
};

// Where ClientSession::Open() spent its time, on the steady clock.
struct SetupTimes {
  // Transport::Connect: address and route resolution, the queue pair, the
  // connection handshake.
  std::chrono::nanoseconds connect{0};
  // From connected to the MRSP answered: the host's registrations, the MRSP
  // request, the NAA allocating and registering its memory, its answer
  // (what the NAAICE library's naaice_register_mrs + naaice_do_mrsp cover).
  std::chrono::nanoseconds register_and_mrsp{0};
};

struct CallOptions {
  // Bytes of each parameter (index into the RegionSpec list) to send; empty =
  // whole parameter. Entries for non-input parameters are ignored.
  // REQUIRES: send_lengths.size() is 0 or the number of RegionSpecs.
  std::span<const uint64_t> send_lengths;
  uint32_t user_bits = 0;  // reference dialect: immediate bits 8..31
  // The session's streams (include/naarpc/stream.h). REQUIRES: non-null iff the
  // session has stream parameters; outlives the call.
  StreamHandler* streams = nullptr;
};

class ClientSession {
 public:
  ~ClientSession();
  ClientSession(const ClientSession&) = delete;
  ClientSession& operator=(const ClientSession&) = delete;

  static Result<std::unique_ptr<ClientSession>> Open(
      Transport& transport, const std::string& host, uint16_t port,
      std::vector<RegionSpec> regions, const ClientOptions& options = {});
  // As above, with connect + MRSP also bounded by `deadline` (a call's
  // deadline that includes setting up its connection); an error names the
  // phase that ran out of time.
  static Result<std::unique_ptr<ClientSession>> Open(
      Transport& transport, const std::string& host, uint16_t port,
      std::vector<RegionSpec> regions, const ClientOptions& options, Deadline deadline);

  // The registered buffer of parameter `index` (in the order given to
  // Open()); fill inputs in place before Call(), read outputs after.
  // Empty span for internal regions or a bad index.
  std::span<std::byte> buffer(size_t index);
  size_t region_count() const;

  // Zero-copy input (docs/protocol.md 16.2): asks that the next call send
  // input parameter `index` from the caller's memory, the elements of
  // `layout` (of `elem` bytes) at `bases` (one per array), by gather lists,
  // instead of from buffer(index). true: staged; false: not possible here
  // (no ClientOptions::user_memory, memory not registered there, runs below
  // zero_copy_min_run_bytes, a parameter split into several wire regions):
  // the caller packs into buffer(index). Either way the registry counts it.
  // Any number of runs: a chain of writes longer than the send queue takes
  // at once is posted in batches as completions free its slots. The next
  // StartCall / Call consumes what was staged (DropStagedInputs forgets it,
  // unless a call is in flight).
  // REQUIRES: the layout is valid and fills the parameter exactly; the
  // memory stays registered and unchanged until the call has finished.
  bool StageGatherInput(size_t index, const Layout& layout, size_t elem,
                        std::span<const std::byte* const> bases);
  void DropStagedInputs();
  const RegionSpec& spec(size_t index) const;

  // Runs one RPC. OK iff the NAA answered with status 0. Failures:
  // kNaaError (wire_code = NAA status), kDeadlineExceeded, kDisconnected,
  // kTransportError (completion error), kProtocolError, kInvalidArgument.
  // After any failure other than kNaaError/kInvalidArgument, and after the
  // NAA status 0x02 (kernel timeout: the NAA closes the connection), the
  // session is in ERROR: the connection is closed and its memory
  // deregistered at once (nothing late can land in the buffers), and every
  // later call fails fast.
  Status Call(uint8_t function_code, Deadline deadline,
              const CallOptions& options = {});

  // Call() without blocking, for event loops (the generated clients' async
  // calls run this way): StartCall validates and posts the request (an error
  // means no call is in flight); then ContinueCall advances it whenever
  // notify_fd() is readable, and once the deadline has passed. ContinueCall
  // returns the call's status (as Call() would) once it has finished, or
  // std::nullopt while it is in flight; it never blocks. Routines with
  // streams run with Call() only. REQUIRES: one call in flight at a time.
  Status StartCall(uint8_t function_code, Deadline deadline, const CallOptions& options = {});
  [[nodiscard]] std::optional<Status> ContinueCall();
  // Blocks until the call started by StartCall has finished (for a
  // transport without notify_fd()); its status, as Call() returns it.
  Status FinishCall();
  // FinishCall() that gives up waiting at `until` (std::nullopt: the call
  // is still in flight; call again, or AbandonCall). Waits on the connection
  // itself, like Call(), not on notify_fd(): for a caller that must look up
  // now and then (e.g. for a signal) without an event loop.
  [[nodiscard]] std::optional<Status> WaitCall(Deadline until);
  // Ends the call in flight with kCancelled; the session is then in ERROR
  // (its connection closed, so the NAA's answer cannot land). No-op if none.
  void AbandonCall();
  // The connection's notification descriptor (Connection::notify_fd);
  // -1 if the transport has none or the session is closed.
  int notify_fd() const;
  // Whether a call started by StartCall has not finished yet.
  bool call_in_flight() const;

  CommState state() const;
  const SetupTimes& setup_times() const;
  // Between calls: whether the NAA has closed the connection meanwhile (it
  // may reclaim an idle session for another peer, docs/server.md); the
  // session is then in ERROR. Never blocks. REQUIRES: no call in flight.
  bool PeerGone();
  Dialect dialect() const;
  uint64_t calls_completed() const;
  // The data the last call's streams moved (their chunks' bytes): written
  // by its input streams, received through its output streams, however far
  // the call got. Zeros for a routine without streams.
  struct StreamBytes {
    uint64_t sent = 0;
    uint64_t received = 0;
  };
  StreamBytes last_stream_bytes() const;

  // Disconnects. Idempotent.
  Status Close();

 private:
  class Impl;
  explicit ClientSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace naarpc

#endif  // NAARPC_CLIENT_SESSION_H_
