#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <torchbus/callbacks/event_file_writer.hpp>
#include <torchbus/crc32c.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <string_view>
#include <thread>

namespace torchbus {

// ---- values and histograms ----------------------------------------------------------------------

SummaryValue SummaryValue::scalar(std::string tag, double value) {
  SummaryValue result;
  result.kind = Kind::Scalar;
  result.tag = std::move(tag);
  result.value = value;
  return result;
}

SummaryValue SummaryValue::histogram(std::string tag, std::vector<double> values, int buckets) {
  SummaryValue result;
  result.kind = Kind::Histogram;
  result.tag = std::move(tag);
  result.values = std::move(values);
  result.buckets = buckets;
  return result;
}

Histogram make_histogram(const std::vector<double>& values, int buckets) {
  TORCHBUS_CHECK(buckets >= 1, ConfigError, "make_histogram: buckets must be >= 1, got ", buckets);
  Histogram result;
  double low = std::numeric_limits<double>::infinity();
  double high = -low;
  for (double value : values) {
    if (!std::isfinite(value)) continue;
    result.num += 1.0;
    result.sum += value;
    result.sum_squares += value * value;
    low = std::min(low, value);
    high = std::max(high, value);
  }
  if (result.num == 0.0) {
    result.bucket_limit = {0.0};
    result.bucket = {0.0};
    return result;
  }
  result.min = low;
  result.max = high;
  if (low == high) {
    result.bucket_limit = {low - 0.5, high + 0.5};
    result.bucket = {0.0, result.num};
    return result;
  }
  // A leading empty bucket whose limit is the minimum tells TensorBoard where the first one starts.
  result.bucket_limit.reserve(static_cast<std::size_t>(buckets) + 1);
  result.bucket_limit.push_back(low);
  for (int i = 1; i <= buckets; ++i) {
    const double t = static_cast<double>(i) / buckets;
    result.bucket_limit.push_back(i == buckets ? high : low * (1.0 - t) + high * t);
  }
  result.bucket.assign(static_cast<std::size_t>(buckets) + 1, 0.0);
  // Halves keep the span finite for values near the limits of double.
  const double span = high / 2 - low / 2;
  for (double value : values) {
    if (!std::isfinite(value)) continue;
    // Bucket i (1-based) holds (limit[i - 1], limit[i]]; the minimum goes in the first one.
    const double position = std::ceil((value / 2 - low / 2) / span * buckets);
    const auto index =
        static_cast<std::size_t>(std::clamp(position, 1.0, static_cast<double>(buckets)));
    result.bucket[index] += 1.0;
  }
  return result;
}

std::string event_file_name() {
  static std::atomic<int> counter{0};
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    std::strcpy(host, "localhost");
  }
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  return fmt::format("events.out.tfevents.{:010d}.{}.{}.{}", seconds, host,
                     static_cast<long>(::getpid()), counter++);
}

double wall_time_now() {
  const std::chrono::duration<double> now = std::chrono::system_clock::now().time_since_epoch();
  return now.count();
}

// ---- encoding -----------------------------------------------------------------------------------

namespace {

/// Appends protocol buffer wire format (proto3) to a string.
class ProtoEncoder {
 public:
  explicit ProtoEncoder(std::string& out) : out_(out) {}

  void int64_field(int field, std::int64_t value) {
    key(field, kVarint);
    varint(static_cast<std::uint64_t>(value));  // two's complement, as protobuf's int64
  }
  void double_field(int field, double value) {
    key(field, kFixed64);
    std::uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(bits));
    little_endian(bits, 8);
  }
  void float_field(int field, float value) {
    key(field, kFixed32);
    std::uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof(bits));
    little_endian(bits, 4);
  }
  void bytes_field(int field, std::string_view bytes) {
    key(field, kLengthDelimited);
    varint(bytes.size());
    out_.append(bytes.data(), bytes.size());
  }
  void packed_doubles(int field, const std::vector<double>& values) {
    key(field, kLengthDelimited);
    varint(values.size() * 8);
    for (double value : values) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, &value, sizeof(bits));
      little_endian(bits, 8);
    }
  }

 private:
  enum WireType : std::uint8_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

  void key(int field, WireType type) { varint((static_cast<std::uint64_t>(field) << 3) | type); }
  void varint(std::uint64_t value) {
    while (value >= 0x80) {
      out_ += static_cast<char>((value & 0x7F) | 0x80);
      value >>= 7;
    }
    out_ += static_cast<char>(value);
  }
  void little_endian(std::uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) out_ += static_cast<char>((value >> (8 * i)) & 0xFF);
  }

  std::string& out_;
};

// Field numbers of tensorboard/compat/proto/{event,summary,histogram}.proto.
namespace field {
constexpr int kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5,
              kEventSessionLog = 7;
constexpr int kSummaryValue = 1;
constexpr int kValueTag = 1, kValueSimpleValue = 2, kValueHisto = 5;
constexpr int kHistoMin = 1, kHistoMax = 2, kHistoNum = 3, kHistoSum = 4, kHistoSumSquares = 5,
              kHistoBucketLimit = 6, kHistoBucket = 7;
constexpr int kSessionLogStatus = 1;
constexpr std::int64_t kSessionLogStart = 1;
}  // namespace field

/// The version string of the first event of every file.
constexpr std::string_view kFileVersion = "brain.Event:2";

/// TFRecord's masked CRC-32C.
std::uint32_t masked_crc(const void* data, std::size_t size) {
  const std::uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

void append_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xFF);
}

std::string describe_errno(int error) {
  return error != 0 ? std::strerror(error) : "unknown error";
}

/// How long queued events may wait for the writer thread when nobody wakes it: producers wake it
/// only when the queue is half full (and flush and close always do), so that queueing an event
/// costs the training thread no system call (waking a sleeping thread is a futex call, and an
/// inter-processor interrupt when it sleeps on another core).
constexpr std::chrono::milliseconds kWriteInterval{100};

/// An event waiting in the queue.
struct QueuedEvent {
  enum class Kind : std::uint8_t { FileVersion, Summary, SessionStart };
  Kind kind = Kind::Summary;
  double wall_time = 0.0;
  std::int64_t step = 0;
  std::vector<SummaryValue> values;
};

}  // namespace

// ---- the writer ---------------------------------------------------------------------------------

struct EventFileWriter::Impl {
  std::string path;
  std::FILE* file = nullptr;
  std::size_t capacity = 0;

  std::mutex mutex;
  std::condition_variable work;   // the thread waits: an event was queued, or it should stop
  std::condition_variable space;  // producers wait: room in the queue; flush waits: idle
  std::deque<QueuedEvent> queue;
  bool writing = false;   // the thread holds an event it took from the queue
  bool stopping = false;  // close() asked the thread to finish
  bool closed = false;
  bool wake = false;          // write now: the queue is half full, or flush asked
  std::string error;          // the first write error (empty: none)
  bool error_thrown = false;  // `error` was thrown once by flush or close
  std::thread thread;

  // Used by the thread only: buffers reused for every event.
  std::string record, event, summary, value, histo;

  void run();
  std::string write(const QueuedEvent& queued);
  void encode(const QueuedEvent& queued);
  void encode_value(const SummaryValue& summary_value);
  void push(QueuedEvent queued);
  std::string write_error(int error_number) const {
    return fmt::format("cannot write the event file '{}': {}", path, describe_errno(error_number));
  }
  /// Throws the write error unless flush or close already did.
  void throw_once() {
    if (error.empty() || error_thrown) return;
    error_thrown = true;
    throw Error(error);
  }
};

EventFileWriter::EventFileWriter(std::string path, std::size_t queue_capacity)
    : impl_(std::make_unique<Impl>()) {
  TORCHBUS_CHECK(queue_capacity >= 1, ConfigError,
                 "EventFileWriter: queue_capacity must be >= 1, got ", queue_capacity);
  impl_->path = std::move(path);
  impl_->capacity = queue_capacity;
  errno = 0;
  impl_->file = std::fopen(impl_->path.c_str(), "wb");
  TORCHBUS_CHECK(impl_->file != nullptr, ConfigError, "cannot create the event file '", impl_->path,
                 "': ", describe_errno(errno));
  QueuedEvent first;
  first.kind = QueuedEvent::Kind::FileVersion;
  first.wall_time = wall_time_now();
  impl_->queue.push_back(std::move(first));
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

EventFileWriter::~EventFileWriter() {
  try {
    close();
  } catch (const std::exception& error) {
    logger()->error("{}", error.what());
  }
}

const std::string& EventFileWriter::path() const noexcept {
  return impl_->path;
}

void EventFileWriter::add_summary(std::int64_t step, std::vector<SummaryValue> values,
                                  double wall_time) {
  QueuedEvent queued;
  queued.kind = QueuedEvent::Kind::Summary;
  queued.wall_time = wall_time;
  queued.step = step;
  queued.values = std::move(values);
  impl_->push(std::move(queued));
}

void EventFileWriter::add_session_start(std::int64_t step, double wall_time) {
  QueuedEvent queued;
  queued.kind = QueuedEvent::Kind::SessionStart;
  queued.wall_time = wall_time;
  queued.step = step;
  impl_->push(std::move(queued));
}

void EventFileWriter::Impl::push(QueuedEvent queued) {
  std::unique_lock<std::mutex> lock(mutex);
  TORCHBUS_CHECK(!closed, Error, "the event file '", path, "' is closed; cannot add an event");
  space.wait(lock, [&] { return queue.size() < capacity || !error.empty(); });
  if (!error.empty()) {
    error_thrown = true;
    throw Error(error);
  }
  queue.push_back(std::move(queued));
  // Wake the thread only when the queue fills up; otherwise it writes within kWriteInterval.
  if (queue.size() < std::max<std::size_t>(1, capacity / 2) || wake) return;
  wake = true;
  lock.unlock();
  work.notify_one();
}

void EventFileWriter::flush() {
  std::unique_lock<std::mutex> lock(impl_->mutex);
  if (impl_->closed) return;
  impl_->wake = true;  // write what is queued now, not at the next interval
  impl_->work.notify_one();
  impl_->space.wait(lock, [&] { return impl_->queue.empty() && !impl_->writing; });
  // The thread is idle and cannot take an event while the lock is held: the file is ours.
  if (impl_->error.empty() && std::fflush(impl_->file) != 0) {
    impl_->error = impl_->write_error(errno);
  }
  impl_->throw_once();
}

void EventFileWriter::close() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->closed) return;
    impl_->stopping = true;
  }
  impl_->work.notify_one();
  impl_->thread.join();  // the thread writes what is queued first
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->closed = true;
  errno = 0;
  if (std::fclose(impl_->file) != 0 && impl_->error.empty()) {
    impl_->error = impl_->write_error(errno);
  }
  impl_->file = nullptr;
  impl_->throw_once();
}

void EventFileWriter::Impl::run() {
  std::unique_lock<std::mutex> lock(mutex);
  for (;;) {
    if (queue.empty()) {
      if (stopping) return;  // everything is written
      // Sleep until woken (queue half full, flush, close) or kWriteInterval has passed; then
      // write everything queued.
      work.wait_for(lock, kWriteInterval, [&] { return wake || stopping; });
      wake = false;
      continue;
    }
    const QueuedEvent queued = std::move(queue.front());
    queue.pop_front();
    writing = true;
    const bool failed = !error.empty();  // after an error, queued events are discarded
    lock.unlock();
    space.notify_all();
    std::string problem = failed ? std::string() : write(queued);
    lock.lock();
    if (problem.empty() && !failed && queue.empty()) {
      // Drained: make what was written visible to TensorBoard.
      lock.unlock();
      errno = 0;
      if (std::fflush(file) != 0) problem = write_error(errno);
      lock.lock();
    }
    if (!problem.empty() && error.empty()) error = std::move(problem);
    writing = false;
    space.notify_all();
  }
}

std::string EventFileWriter::Impl::write(const QueuedEvent& queued) {
  try {
    encode(queued);
    record.clear();
    append_le(record, event.size(), 8);
    append_le(record, masked_crc(record.data(), 8), 4);
    record += event;
    append_le(record, masked_crc(event.data(), event.size()), 4);
  } catch (const std::exception& failure) {
    return fmt::format("cannot encode an event for '{}': {}", path, failure.what());
  }
  errno = 0;
  if (std::fwrite(record.data(), 1, record.size(), file) != record.size()) {
    return write_error(errno);
  }
  return {};
}

void EventFileWriter::Impl::encode(const QueuedEvent& queued) {
  event.clear();
  ProtoEncoder out(event);
  out.double_field(field::kEventWallTime, queued.wall_time);
  out.int64_field(field::kEventStep, queued.step);
  switch (queued.kind) {
    case QueuedEvent::Kind::FileVersion:
      out.bytes_field(field::kEventFileVersion, kFileVersion);
      break;
    case QueuedEvent::Kind::SessionStart: {
      std::string session;
      ProtoEncoder(session).int64_field(field::kSessionLogStatus, field::kSessionLogStart);
      out.bytes_field(field::kEventSessionLog, session);
      break;
    }
    case QueuedEvent::Kind::Summary:
      summary.clear();
      for (const auto& summary_value : queued.values) {
        encode_value(summary_value);
        ProtoEncoder(summary).bytes_field(field::kSummaryValue, value);
      }
      out.bytes_field(field::kEventSummary, summary);
      break;
  }
}

void EventFileWriter::Impl::encode_value(const SummaryValue& summary_value) {
  value.clear();
  ProtoEncoder out(value);
  out.bytes_field(field::kValueTag, summary_value.tag);
  if (summary_value.kind == SummaryValue::Kind::Scalar) {
    out.float_field(field::kValueSimpleValue, static_cast<float>(summary_value.value));
    return;
  }
  const Histogram histogram = make_histogram(summary_value.values, summary_value.buckets);
  histo.clear();
  ProtoEncoder h(histo);
  h.double_field(field::kHistoMin, histogram.min);
  h.double_field(field::kHistoMax, histogram.max);
  h.double_field(field::kHistoNum, histogram.num);
  h.double_field(field::kHistoSum, histogram.sum);
  h.double_field(field::kHistoSumSquares, histogram.sum_squares);
  h.packed_doubles(field::kHistoBucketLimit, histogram.bucket_limit);
  h.packed_doubles(field::kHistoBucket, histogram.bucket);
  out.bytes_field(field::kValueHisto, histo);
}

}  // namespace torchbus
