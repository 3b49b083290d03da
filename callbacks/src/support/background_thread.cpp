#include "support/background_thread.hpp"

#include <utility>

namespace torchbus::detail {

BackgroundThread::~BackgroundThread() {
  if (!thread_.joinable()) return;
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return !task_; });
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void BackgroundThread::start(std::function<void()> task) {
  wait();
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  {
    std::lock_guard lock(mutex_);
    task_ = std::move(task);
  }
  changed_.notify_all();
}

void BackgroundThread::wait() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return !task_; });
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void BackgroundThread::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return task_ || stopping_; });
    if (!task_) return;  // stopping, nothing left to run
    lock.unlock();
    std::exception_ptr failure;
    try {
      task_();
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    failure_ = failure;
    task_ = nullptr;
    changed_.notify_all();
  }
}

}  // namespace torchbus::detail
