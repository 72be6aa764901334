// cudasim/streams.h — CUDA streams and events in the simulator. Each stream is a queue with its
// own worker thread: ops run in order, independently of the host and of other streams. In the default
// "lazy" mode an op runs only once the program's own synchronisation asks for it (cudaStreamSynchronize,
// cudaEventQuery/Synchronize, cudaDeviceSynchronize, a cudaStreamWaitEvent that another released stream
// reaches, cudaMemcpy, cudaFree), i.e. as late as CUDA allows: a missing wait or sync reads stale data
// every time instead of by luck. "eager" (SFTDP_SIM_STREAMS=eager) releases each op when it is queued.
// Kernels, copies, GEMMs and collectives hold one process-wide execution lock while they run (one
// thing executes at a time, as on a GPU that never overlaps streams), waits do not.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cudasim/stream_order.h"

namespace sftdp::sim {

class Stream {
 public:
  enum class Kind { kLegacy, kBlocking, kNonBlocking };
  Stream(int device, Kind kind);
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int device() const { return device_; }
  Kind kind() const { return kind_; }
  // Queues fn to run on this stream's worker after everything queued before it; returns the op's
  // number (1, 2, ...). exec: hold the execution lock while it runs (everything but waits). An op
  // queued while the device has a sticky error, or reached after one, is skipped.
  uint64_t enqueue(std::string what, std::function<void()> fn, bool exec = true);
  uint64_t tail() const;  // number of the last op queued (0: none)
  bool finished(uint64_t seq) const;
  void release(uint64_t seq);  // ops up to seq may run
  void wait(uint64_t seq);     // release(seq), then block until op seq has finished
  void shut_down();            // runs what is queued, then stops the worker
  // streamcheck (stream_order.h): the clock of the last op queued, and an edge ordering every later op after
  // `c` (a wait for an event or another stream).
  order::Clock clock() const { return order::copy(clock_); }
  void order_after(const order::Clock& c) { order::join(clock_, c); }
  uint64_t order_id() const { return id_; }

 private:
  struct Op {
    uint64_t seq;
    std::string what;
    std::function<void()> fn;
    bool exec;
    std::shared_ptr<const order::Stamp> stamp;  // streamcheck's clock of the op (null when it is off)
  };
  void work();

  const int device_;
  const Kind kind_;
  const uint64_t id_ = order::new_stream_id();
  order::Clock clock_;  // guarded by stream_order.cpp's lock
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  uint64_t next_ = 1, released_ = 0, finished_ = 0;
  bool stopping_ = false;
  std::thread worker_;
};

std::mutex& execution_lock();

// A cudaEvent_t: where it was last recorded (stream, op number) and, if timing, when that op ran.
struct Event {
  unsigned flags = 0;
  std::mutex mu;
  Stream* stream = nullptr;  // null: never recorded (complete)
  uint64_t seq = 0;
  uint64_t generation = 0;  // of the latest record: an older record's marker must not set the time
  order::Clock clock;       // streamcheck: the latest record's clock (what a wait for it is ordered after)
  double time_ms = -1;      // steady clock at the marker of the latest record; < 0 until it ran
  // A record made while its stream captured (capture.h): the capture's id (0: recorded outside one) and
  // the graph nodes the record stands for; stream and seq then still name the last eager record.
  uint64_t capture = 0;
  std::vector<uint32_t> capture_nodes;
};

}  // namespace sftdp::sim
