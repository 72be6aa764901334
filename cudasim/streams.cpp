// cudasim/streams.cpp — stream queues and their workers (see streams.h).
#include "cudasim/streams.h"

#include <signal.h>

#include <algorithm>
#include <vector>

#include "cudasim/runtime.h"
#include "cudasim/sanitizer.h"

namespace sftdp::sim {

std::mutex& execution_lock() {
  static std::mutex* m = new std::mutex;  // never destroyed: workers may run during exit
  return *m;
}

Stream::Stream(int device, Kind kind) : device_(device), kind_(kind), worker_([this] { work(); }) {}

uint64_t Stream::enqueue(std::string what, std::function<void()> fn, bool exec) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t seq = next_++;
  std::shared_ptr<const order::Stamp> stamp;
  if (order::enabled()) stamp = order::stamp(id_, device_, seq, what, clock_);
  queue_.push_back(Op{seq, std::move(what), std::move(fn), exec, std::move(stamp)});
  if (!settings().lazy_streams) released_ = seq;
  cv_.notify_all();
  return seq;
}

uint64_t Stream::tail() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_ - 1;
}

bool Stream::finished(uint64_t seq) const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_ >= seq;
}

void Stream::release(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  if (seq > released_) {
    released_ = seq;
    cv_.notify_all();
  }
}

void Stream::wait(uint64_t seq) {
  std::unique_lock<std::mutex> lock(mu_);
  seq = std::min(seq, next_ - 1);  // nothing to wait for beyond what was queued
  if (seq > released_) {
    released_ = seq;
    cv_.notify_all();
  }
  cv_.wait(lock, [&] { return finished_ >= seq; });
}

void Stream::shut_down() {
  wait(tail());
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  worker_.join();
}

void Stream::work() {
  // Kernels run here on fiber stacks: a fault there (a guard page hit, a fiber stack overflow)
  // must be reported from a stack of its own (faults.cpp). Kept for the thread's life. ASan gives
  // every thread one already (and unmaps it at thread exit: it must stay ASan's).
#ifndef SFTDP_SIM_ASAN
  static thread_local std::vector<char> alt(size_t{256} << 10);
  stack_t ss{};
  ss.ss_sp = alt.data();
  ss.ss_size = alt.size();
  sigaltstack(&ss, nullptr);
#endif
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && queue_.front().seq <= released_); });
      if (queue_.empty() || queue_.front().seq > released_) return;  // stopping, nothing runnable left
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    order::set_current(op.stamp);  // what the op touches is checked against its clock (stream_order.h)
    if (op.exec) {
      std::lock_guard<std::mutex> exec(execution_lock());
      // After a kernel fault the device runs nothing more (CUDA's sticky errors).
      if (sticky_error(device_) == cudaSuccess) op.fn();
    } else {
      op.fn();
    }
    order::set_current(nullptr);
    op.fn = nullptr;  // release what the op captured before it counts as finished
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = op.seq;
    cv_.notify_all();
  }
}

}  // namespace sftdp::sim
