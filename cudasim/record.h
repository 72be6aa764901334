// cudasim/record.h — record mode: with SFTDP_SIM_RECORD=<path> the simulator appends one JSON line per
// device operation to <path>, in the order the host queued them (so each stream's lines are in its
// execution order): kernel launches (name as written at the launch, file:line, grid, block, dynamic shared
// memory, every argument with its C++ type: scalars by value, pointers as the allocation they point into),
// cuBLASLt matmuls, memcpy/memset, NCCL collectives, and the program's own marks. With
// SFTDP_SIM_RECORD_ONLY=1 the device work is recorded but not run (kernel bodies, GEMM arithmetic,
// collective arithmetic, memsets and device-to-device copies are skipped; host<->device copies still
// run), and cudaMalloc leaves new memory as the OS gives it (zero pages, touched only when written), so
// a full-size step costs little time and memory. bench/gpu_cost.py reads the records. README: "Record mode".
#pragma once
#include <cstdint>
#include <string>

namespace sftdp::sim {

class Stream;
struct KernelLaunch;

// ---- for programs that drive a record (bench/gpu_step_record.cpp, tests) ---------------------------
bool recording();    // a record file is open
bool record_only();  // device work is recorded, not run
// A {"op":"mark","label":...} line between the device operations queued before and after it; `fields`:
// extra JSON members, written as given (",\"k\":1" style without the leading comma: "\"k\":1,\"j\":2").
void record_mark(const std::string& label, const std::string& fields = "");
// While paused, operations run as the mode says but are not recorded (work a driver adds that a real run
// would not have). Not nested.
void record_pause(bool paused);
// Tests only: record to `path` from now on (appending; "" stops recording), record-only or not. Replaces
// what SFTDP_SIM_RECORD and SFTDP_SIM_RECORD_ONLY set.
void set_record(const std::string& path, bool only);

// ---- the simulator's hooks -----------------------------------------------------------------------
// Opens the record file the settings name (at the devices' creation); a path that cannot be opened is
// "error: SFTDP_SIM_RECORD=...: <reason>" and exit 2.
void open_record_from_settings();
// One line {"op":<op>,"seq":..,"device":..,"stream":..,<fields>} for an operation queued on `s` (null:
// no stream). `fields`: JSON members as in record_mark.
void record_op(const char* op, const Stream* s, const std::string& fields);
// A kernel's line; `extra` is appended to its fields (a replay's graph and node).
void record_kernel(const KernelLaunch& l, const Stream& s, const std::string& extra = "");
// cudaStreamDestroy: a later stream at the same address gets a new id.
void forget_stream(const Stream* s);

// JSON pieces for the hooks' fields.
std::string json_string(const std::string& s);
std::string json_number(double x);  // shortest round-trip form; NaN/inf as strings
// {"alloc":id,"offset":bytes} of a device pointer, {"alloc":null} for null, {"host":true} otherwise.
std::string json_pointer(const void* p);

}  // namespace sftdp::sim
