// libFuzzer target for the generated NAA-side skeletons
// (tests/codegen/testdata/golden.naa.yaml): what they decode from the host —
// the region layout and flags of the MRSP, the dialect, and the
// variable-length parameters' 8-byte length headers — is peer-supplied.
// Each input builds one NaaCall (regions of any count and size, their bytes,
// flags and directions) and runs it through both services' Handle().
//
// The kernels touch every element the skeleton hands them (ASan sees any
// view past its region) and resize their variable outputs to sizes taken
// from the input, beyond the maximum too. Besides crashes and sanitizer
// reports the target aborts if
//  * a status outside the kernel's own and the runtime's is returned;
//  * a kernel runs although the layout does not match the IDL (wrong
//    count, size or direction), or a variable input's length header exceeds
//    its maximum;
//  * a kernel's input span is longer than its length header says, or an
//    output is declared longer than its region (reply_length);
//  * a kernel asking for more elements than the maximum gets status 0
//    (silent truncation) instead of 0x05 with a failure detail.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/codegen/testdata/golden.naa.h"

namespace {

using namespace naarpc::testing::golden;
using naarpc::codegen::VarSpan;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "skeleton_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

// Reads bytes from the input, zeros past its end.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint64_t Be64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | Byte();
    return v;
  }
  void Fill(std::span<std::byte> out) {
    for (std::byte& b : out) b = std::byte{Byte()};
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

template <typename T>
uint64_t Touch(std::span<T> s) {
  uint64_t sum = 0;
  for (const T& v : s) {
    unsigned char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    for (unsigned char c : b) sum += c;
  }
  return sum;
}

// What the kernels saw and asked for, for the checks after Handle().
struct KernelRun {
  bool ran = false;
  bool overflowed = false;  // asked for more than a maximum
  uint8_t status = 0;
};

class FuzzKitchen final : public KitchenService {
 public:
  explicit FuzzKitchen(Input& in) : in_(in) {}
  KernelRun run;

  KitchenError Mixed(const naarpc::NaaCall&, std::span<const uint16_t> fixed_in, int32_t,
                     std::span<const double> var_in, std::span<const std::byte> blob,
                     std::span<int64_t> fixed_out, float& scalar_out, VarSpan<uint32_t>& var_out,
                     std::span<int8_t> fixed_io, VarSpan<uint64_t>& var_io,
                     std::span<uint8_t> scratch, std::span<float> table) override {
    run.ran = true;
    if (fixed_in.size() != 8 || var_in.size() > 16 || blob.size() != 32 ||
        fixed_out.size() != 4 || var_out.max_size() != 10 || fixed_io.size() != 3 ||
        var_io.max_size() != 5 || var_io.size() > 5 || scratch.size() != 64 ||
        table.size() != 4) {
      Fail("Mixed got views of the wrong size");
    }
    uint64_t sum = Touch(fixed_in) + Touch(var_in) + Touch(blob) + Touch(fixed_io) +
                   Touch(var_io.data()) + Touch(scratch) + Touch(table);
    for (int64_t& v : fixed_out) v = static_cast<int64_t>(sum);
    scalar_out = 1.5f;
    for (uint32_t& v : var_out.capacity()) v = 7;
    for (uint64_t& v : var_io.capacity()) v = sum;
    Resize(var_out, in_.Byte() % 16);
    Resize(var_io, in_.Byte() % 8);
    return Status(in_.Byte());
  }

  KitchenError Echo(const naarpc::NaaCall&, std::span<const uint8_t> x,
                    VarSpan<uint8_t>& y) override {
    run.ran = true;
    if (x.size() > 100 || y.max_size() != 100) Fail("Echo got views of the wrong size");
    (void)Touch(x);
    const size_t n = x.size() + in_.Byte() % 4;  // may ask for more than 100
    if (y.resize(n)) std::memcpy(y.data().data(), x.data(), x.size());
    if (n > 100) run.overflowed = true;
    return Status(in_.Byte());
  }

 private:
  template <typename T>
  void Resize(VarSpan<T>& v, size_t n) {
    if (!v.resize(n)) run.overflowed = true;
  }
  // Mostly success, sometimes an application error (0x10..0x7f) or a
  // standard status.
  KitchenError Status(uint8_t b) {
    run.status = b < 0xc0 ? 0 : static_cast<uint8_t>(b & 0x7f);
    return static_cast<KitchenError>(run.status);
  }
  Input& in_;
};

class FuzzSecond final : public SecondService {
 public:
  bool ran = false;
  SecondError Ping(const naarpc::NaaCall&, uint32_t& v) override {
    ran = true;
    v = v * 2 + 1;
    return SecondError::kOk;
  }
};

// The IDL's layout for a function code: region sizes, output flags, and the
// variable-length parameters' (index, maximum).
struct Layout {
  std::vector<size_t> sizes;
  std::vector<bool> outputs;
  std::vector<uint8_t> flags;  // reference dialect: the MRSP flags & 0x0e
  std::vector<std::pair<size_t, uint64_t>> var_inputs;  // host-written headers
};

const Layout* IdlLayout(uint8_t code) {
  static const Layout mixed{{16, 4, 8 + 16 * 8, 32, 32, 4, 8 + 10 * 4, 3, 8 + 5 * 8},
                            {false, false, false, false, true, true, true, true, true},
                            {0x04, 0x04, 0x04, 0x06, 0x08, 0x08, 0x08, 0x0c, 0x0c},
                            {{2, 16}, {8, 5}}};
  static const Layout echo{{108, 108}, {false, true}, {0x04, 0x08}, {{0, 100}}};
  static const Layout ping{{4}, {true}, {0x0c}, {}};
  switch (code) {
    case 7: return &mixed;
    case 127: return &echo;
    case 1: return &ping;
    default: return nullptr;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  naarpc::NaaCall call;
  const uint8_t pick = in.Byte();
  const uint8_t codes[] = {7, 127, 1};
  call.function_code = pick < 0xf0 ? codes[pick % 3] : static_cast<uint8_t>(pick & 0x7f);
  call.dialect = in.Byte() & 1 ? naarpc::Dialect::kReference : naarpc::Dialect::kSpec;
  const Layout* idl = IdlLayout(call.function_code);

  // Regions: by default the IDL's layout (so that kernels run), each part
  // of it perturbed by a steering byte.
  const uint8_t steer = in.Byte();
  size_t count = idl ? idl->sizes.size() : in.Byte() % 12;
  if (steer & 0x01) count = in.Byte() % 12;
  std::vector<std::vector<std::byte>> storage(count);
  std::vector<naarpc::NaaRegion> params(count);
  for (size_t i = 0; i < count; ++i) {
    size_t bytes = idl && i < idl->sizes.size() ? idl->sizes[i] : in.Byte();
    if (steer & 0x02 && (in.Byte() & 7) == 0) bytes = in.Byte();
    storage[i].resize(bytes);  // exact size: ASan sees any read past it
    in.Fill(storage[i]);
    params[i].data = storage[i];
    bool out = idl && i < idl->outputs.size() ? idl->outputs[i] : (in.Byte() & 1);
    if (steer & 0x04 && (in.Byte() & 7) == 0) out = !out;
    params[i].is_output = out;
    // Reference-dialect flags as the MRSP sets them; sometimes random.
    params[i].flags = idl && i < idl->flags.size() ? idl->flags[i] : (out ? 0x08 : 0x04);
    if (steer & 0x08) params[i].flags = in.Byte();
    params[i].is_input = !out || (params[i].flags & 0x04) != 0;
  }
  // Length headers of variable inputs: in range unless steered past.
  if (idl && count == idl->sizes.size()) {
    for (auto [index, max] : idl->var_inputs) {
      if (storage[index].size() < 8) continue;
      uint64_t n = in.Byte() % (max + 1);
      if (steer & 0x10) n = in.Be64();
      for (int b = 0; b < 8; ++b) storage[index][b] = std::byte(n >> (56 - 8 * b));
    }
  }
  // Internal regions (Mixed: 64 x u8, 4 x f32), sometimes missized.
  std::vector<std::vector<std::byte>> internal_storage = {std::vector<std::byte>(64),
                                                          std::vector<std::byte>(16)};
  if (steer & 0x20) internal_storage.resize(in.Byte() % 4, std::vector<std::byte>(in.Byte()));
  std::vector<std::span<std::byte>> internal;
  for (auto& s : internal_storage) internal.emplace_back(s);
  // The kernel's views are the IDL's sizes; a larger internal region (the
  // host asked for more in the MRSP) is fine.
  const bool mixed_internal = internal_storage.size() == 2 && internal_storage[0].size() >= 64 &&
                              internal_storage[1].size() >= 16;
  if (call.function_code != 7) internal.clear();
  call.params = params;
  call.internal = internal;

  // Does the layout match the IDL exactly (then the kernel must run)?
  bool matches = idl && count == idl->sizes.size() && (call.function_code != 7 || mixed_internal);
  for (size_t i = 0; matches && i < count; ++i) {
    matches = storage[i].size() == idl->sizes[i] && params[i].is_output == idl->outputs[i];
    if (call.dialect == naarpc::Dialect::kReference) {
      matches = matches && (params[i].flags & 0x0e) == idl->flags[i];
    }
  }
  bool headers_ok = true;
  if (idl && count == idl->sizes.size()) {
    for (auto [index, max] : idl->var_inputs) {
      if (storage[index].size() < 8) continue;
      uint64_t n = 0;
      for (int b = 0; b < 8; ++b) n = n << 8 | std::to_integer<uint8_t>(storage[index][b]);
      headers_ok = headers_ok && n <= max;
    }
  }

  FuzzKitchen kitchen(in);
  FuzzSecond second;
  const bool is_second = call.function_code == 1;
  const uint8_t status = is_second ? second.Handle(call) : kitchen.Handle(call);
  const bool ran = is_second ? second.ran : kitchen.run.ran;

  if (!idl) {
    if (ran) Fail("a kernel ran for a function code the service does not have");
    if (status != naarpc::kNaaStatusUnknownFunction) Fail("unknown code not refused as such");
    return 0;
  }
  if (ran && !headers_ok) Fail("a kernel ran with a length header beyond its maximum");
  if (!ran) {
    if (status != naarpc::kNaaStatusBadRegionLayout) Fail("refused layout without 0x04");
    // Only a layout the IDL would not produce, or out-of-range headers, are refused.
    if (matches && headers_ok) {
      Fail("a layout matching the IDL was refused");
    }
    return 0;
  }
  if (!matches) Fail("a kernel ran for a wrong layout");
  if (!is_second) {
    if (kitchen.run.overflowed && kitchen.run.status == 0) {
      if (status != naarpc::kNaaStatusKernelFailed || call.failure_detail.empty()) {
        Fail("an output larger than its maximum was not failed with 0x05 and a detail");
      }
      return 0;
    }
    if (status != kitchen.run.status) Fail("the kernel's status was not returned");
  }
  for (size_t i = 0; i < count; ++i) {
    if (params[i].reply_length > storage[i].size()) Fail("reply longer than its region");
  }
  return 0;
}
