#pragma once

// Internal to torchbus::callbacks (not installed): one thread that runs the tasks a logger hands
// over, one at a time.

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace torchbus::detail {

/// A thread, started at the first task and kept until destruction, that runs one task at a time:
/// `start` hands a task over, `wait` waits for it and rethrows what it threw. Handing a task to
/// the waiting thread costs a wake-up, where a thread per task (std::async) costs creating one
/// (a clone, a stack and every library's thread-local storage: 20-250 us against ~5 us).
class BackgroundThread {
 public:
  BackgroundThread() = default;
  /// Waits for the task in flight (what it threw is dropped), then ends the thread.
  ~BackgroundThread();
  BackgroundThread(const BackgroundThread&) = delete;
  BackgroundThread& operator=(const BackgroundThread&) = delete;

  /// Runs `task` on the thread, after waiting for the task before it (whose exception is then
  /// thrown here, and `task` not started). Throws std::system_error when no thread can be started.
  void start(std::function<void()> task);
  /// Returns once no task is in flight; rethrows, once, what the last task threw.
  void wait();

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> task_;  // the task handed over, empty once it ran
  std::exception_ptr failure_;  // what the last task threw, until `wait` rethrows it
  bool stopping_ = false;
  std::thread thread_;  // last: started after the members it reads
};

}  // namespace torchbus::detail
