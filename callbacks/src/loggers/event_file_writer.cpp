#include "loggers/event_file_writer.hpp"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <tensorboard/event.pb.h>
#include <unistd.h>
#include <boost/crc.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>
#include <torchbus/system_error_text.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <limits>
#include <mutex>
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

SummaryValue SummaryValue::text(std::string tag, std::string markdown) {
  SummaryValue result;
  result.kind = Kind::Text;
  result.tag = std::move(tag);
  result.markdown = std::move(markdown);
  return result;
}

void fill_histogram(const std::vector<double>& values, int buckets,
                    tensorboard::HistogramProto& histogram) {
  TORCHBUS_CHECK(buckets >= 1, ConfigError, "fill_histogram: buckets must be >= 1, got ", buckets);
  histogram.Clear();
  double num = 0.0, sum = 0.0, sum_squares = 0.0;
  double low = std::numeric_limits<double>::infinity();
  double high = -low;
  for (double value : values) {
    if (!std::isfinite(value)) continue;
    num += 1.0;
    sum += value;
    sum_squares += value * value;
    low = std::min(low, value);
    high = std::max(high, value);
  }
  histogram.set_num(num);
  histogram.set_sum(sum);
  histogram.set_sum_squares(sum_squares);
  if (num == 0.0) {
    histogram.add_bucket_limit(0.0);
    histogram.add_bucket(0.0);
    return;
  }
  histogram.set_min(low);
  histogram.set_max(high);
  if (low == high) {
    histogram.add_bucket_limit(low - 0.5);
    histogram.add_bucket_limit(high + 0.5);
    histogram.add_bucket(0.0);
    histogram.add_bucket(num);
    return;
  }
  // A leading empty bucket whose limit is the minimum tells TensorBoard where the first one starts.
  auto& limits = *histogram.mutable_bucket_limit();
  limits.Reserve(buckets + 1);
  limits.Add(low);
  for (int i = 1; i <= buckets; ++i) {
    const double t = static_cast<double>(i) / buckets;
    limits.Add(i == buckets ? high : low * (1.0 - t) + high * t);
  }
  auto& counts = *histogram.mutable_bucket();
  counts.Resize(buckets + 1, 0.0);
  // Halves keep the span finite for values near the limits of double.
  const double span = high / 2 - low / 2;
  for (double value : values) {
    if (!std::isfinite(value)) continue;
    // Bucket i (1-based) holds (limit[i - 1], limit[i]]; the minimum goes in the first one.
    const double position = std::ceil((value / 2 - low / 2) / span * buckets);
    const auto index = static_cast<int>(std::clamp(position, 1.0, static_cast<double>(buckets)));
    counts[index] += 1.0;
  }
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

/// The version string of the first event of every file.
constexpr const char* kFileVersion = "brain.Event:2";

/// CRC-32C (Castagnoli), as TFRecord frames records with.
using Crc32c = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

/// TFRecord's masked CRC-32C.
std::uint32_t masked_crc(const char* data, std::size_t size) {
  Crc32c crc;
  crc.process_bytes(data, size);
  const std::uint32_t value = crc.checksum();
  return ((value >> 15) | (value << 17)) + 0xa282ead8u;
}

void store_le(char* out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xFF);
}

/// How long queued events may wait for the writer thread when nobody wakes it: producers wake it
/// only when the queue is half full (and flush and close always do), so that queueing an event
/// costs the training thread no system call (waking a sleeping thread is a futex call, and an
/// inter-processor interrupt when it sleeps on another core).
constexpr std::chrono::milliseconds kWriteInterval{100};

/// Sets `value` (a reused Summary.Value) to `summary_value`.
void encode_value(const SummaryValue& summary_value, tensorboard::Summary::Value& value) {
  value.set_tag(summary_value.tag);
  switch (summary_value.kind) {
    case SummaryValue::Kind::Scalar:
      value.set_simple_value(static_cast<float>(summary_value.value));
      break;
    case SummaryValue::Kind::Histogram:
      fill_histogram(summary_value.values, summary_value.buckets, *value.mutable_histo());
      break;
    case SummaryValue::Kind::Text: {
      // As TensorBoard's text plugin (and PyTorch's add_text) writes it: the plugin's name, its
      // TextPluginData{version: 0} as content (empty once serialized), a string tensor of shape
      // [1].
      value.mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
      auto& tensor = *value.mutable_tensor();
      tensor.set_dtype(tensorboard::DT_STRING);
      tensor.mutable_tensor_shape()->add_dim()->set_size(1);
      tensor.add_string_val(summary_value.markdown);
      break;
    }
  }
}

}  // namespace

// ---- the writer ---------------------------------------------------------------------------------

/// An entry of the queue: one event, or a burst of scalars (an event per step). Outside the
/// anonymous namespace: a member of Impl, which has external linkage, may not use its types.
struct QueuedEvent {
  enum class Kind : std::uint8_t { FileVersion, Summary, Scalars, SessionStart };
  Kind kind = Kind::Summary;
  double wall_time = 0.0;
  std::int64_t step = 0;
  std::vector<SummaryValue> values;  // Summary
  std::vector<ScalarPoint> points;   // Scalars
};

struct EventFileWriter::Impl {
  std::string path;
  std::FILE* file = nullptr;
  std::size_t capacity = 0;

  mutable std::mutex mutex;
  std::condition_variable work;   // the thread waits: an event was queued, or it should stop
  std::condition_variable space;  // producers wait: room in the queue; flush waits: idle
  std::deque<QueuedEvent> queue;
  bool writing = false;        // the thread holds an event it took from the queue
  bool stopping = false;       // the destructor asked the thread to finish
  bool closed = true;          // no file is open
  bool wake = false;           // write now: the queue is half full, or flush or close asked
  bool between_files = false;  // the thread sleeps until a file is opened
  std::string error;           // the first write error (empty: none)
  bool error_thrown = false;   // `error` was thrown once by flush or close
  std::thread thread;

  std::vector<std::string> scalar_tags;  // the tags of add_scalars, by index

  // Used by the thread only, reused for every event: a summary event keeps its Summary.Value
  // objects (clearing a repeated field keeps them for the next event), the record its capacity.
  tensorboard::Event summary_event;
  std::string record;

  void run();
  /// Opens `new_path` and queues its first record; returns whether the thread must be woken.
  bool start_file(std::string new_path);
  std::string write(const QueuedEvent& queued);
  std::string write_scalars(const std::vector<ScalarPoint>& points);
  std::string write_record(const tensorboard::Event& event);
  tensorboard::Summary& start_summary(double wall_time, std::int64_t step);
  void push(QueuedEvent queued);
  std::string write_error(int error_number) const {
    return fmt::format("cannot write the event file '{}': {}", path,
                       system_error_text(error_number));
  }
  /// Throws the write error unless flush or close already did.
  void throw_once() {
    if (error.empty() || error_thrown) return;
    error_thrown = true;
    throw Error(error);
  }
};

EventFileWriter::EventFileWriter(std::string path, std::size_t queue_capacity,
                                 std::vector<std::string> scalar_tags)
    : impl_(std::make_unique<Impl>()) {
  TORCHBUS_CHECK(queue_capacity >= 1, ConfigError,
                 "EventFileWriter: queue_capacity must be >= 1, got ", queue_capacity);
  impl_->capacity = queue_capacity;
  impl_->scalar_tags = std::move(scalar_tags);
  impl_->start_file(std::move(path));
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

EventFileWriter::~EventFileWriter() {
  try {
    close();
  } catch (const std::exception& error) {
    logger()->error("{}", error.what());
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->work.notify_one();
  impl_->thread.join();
}

void EventFileWriter::open(std::string path) {
  TORCHBUS_CHECK(!is_open(), Error, "EventFileWriter: '", impl_->path,
                 "' is still open; close it before opening '", path, "'");
  if (impl_->start_file(std::move(path))) impl_->work.notify_one();
}

bool EventFileWriter::is_open() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return !impl_->closed;
}

bool EventFileWriter::Impl::start_file(std::string new_path) {
  errno = 0;
  std::FILE* opened = std::fopen(new_path.c_str(), "wb");
  TORCHBUS_CHECK(opened != nullptr, ConfigError, "cannot create the event file '", new_path,
                 "': ", system_error_text(errno));
  QueuedEvent first;
  first.kind = QueuedEvent::Kind::FileVersion;
  first.wall_time = wall_time_now();
  // Closed: the thread is idle (or not started) and touches neither the file nor the path.
  std::lock_guard<std::mutex> lock(mutex);
  path = std::move(new_path);
  file = opened;
  closed = false;
  error.clear();
  error_thrown = false;
  queue.push_back(std::move(first));
  // Otherwise the thread is in its kWriteInterval wait: it writes the record when that ends.
  return between_files;
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

void EventFileWriter::add_scalars(std::vector<ScalarPoint> points) {
  if (points.empty()) return;
  for (const auto& point : points) {
    TORCHBUS_CHECK(point.tag < impl_->scalar_tags.size(), ConfigError, "EventFileWriter '",
                   impl_->path, "': scalar tag index ", point.tag, " out of range; it has ",
                   impl_->scalar_tags.size(), " scalar tags");
  }
  QueuedEvent queued;
  queued.kind = QueuedEvent::Kind::Scalars;
  queued.points = std::move(points);
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
  if (queue.size() >= capacity) {
    // Full: the thread writes now, not at the end of its interval (a new file's version record
    // alone fills a queue of one, and queueing it woke nobody).
    wake = true;
    work.notify_one();
    space.wait(lock, [&] { return queue.size() < capacity || !error.empty() || closed; });
    // Another thread closed the writer while this one waited.
    TORCHBUS_CHECK(!closed, Error, "the event file '", path, "' was closed; cannot add an event");
  }
  if (!error.empty()) {
    error_thrown = true;
    throw Error(error);
  }
  queue.push_back(std::move(queued));
  // Wake the thread only when the queue is half full; otherwise it writes within kWriteInterval.
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
  std::unique_lock<std::mutex> lock(impl_->mutex);
  if (impl_->closed) return;
  impl_->wake = true;  // write what is queued now
  impl_->work.notify_one();
  impl_->space.wait(lock, [&] { return impl_->queue.empty() && !impl_->writing; });
  // The thread is idle and cannot take an event while the lock is held: the file is ours.
  impl_->closed = true;
  errno = 0;
  if (std::fclose(impl_->file) != 0 && impl_->error.empty()) {
    impl_->error = impl_->write_error(errno);
  }
  impl_->file = nullptr;
  lock.unlock();
  impl_->space.notify_all();  // a producer of another thread waiting for room sees the close
  lock.lock();
  impl_->throw_once();
}

void EventFileWriter::Impl::run() {
  std::unique_lock<std::mutex> lock(mutex);
  for (;;) {
    if (queue.empty()) {
      if (stopping) return;  // everything is written
      if (file == nullptr) {
        // Between files: sleep until the next one is opened (its first event queued).
        between_files = true;
        work.wait(lock, [&] { return !queue.empty() || stopping; });
        between_files = false;
      } else {
        // Sleep until woken (queue half full, flush, close) or kWriteInterval has passed; then
        // write everything queued.
        work.wait_for(lock, kWriteInterval, [&] { return wake || stopping; });
      }
      wake = false;
      continue;
    }
    const QueuedEvent queued = std::move(queue.front());
    const bool was_full = queue.size() >= capacity;
    queue.pop_front();
    writing = true;
    const bool failed = !error.empty();  // after an error, queued events are discarded
    lock.unlock();
    // Wake only who waits for this: a producer for room in a full queue here, flush and close
    // for the drained queue below (a wake-up per event would wake them for nothing).
    if (was_full) space.notify_all();
    std::string problem = failed ? std::string() : write(queued);
    lock.lock();
    if (problem.empty() && !failed && queue.empty()) {
      // Drained: make what was written visible to TensorBoard.
      lock.unlock();
      errno = 0;
      if (std::fflush(file) != 0) problem = write_error(errno);
      lock.lock();
    }
    const bool new_error = !problem.empty() && error.empty();
    if (new_error) error = std::move(problem);
    writing = false;
    if (queue.empty() || new_error) space.notify_all();
  }
}

std::string EventFileWriter::Impl::write(const QueuedEvent& queued) {
  try {
    switch (queued.kind) {
      case QueuedEvent::Kind::FileVersion: {
        tensorboard::Event event;
        event.set_wall_time(queued.wall_time);
        event.set_file_version(kFileVersion);
        return write_record(event);
      }
      case QueuedEvent::Kind::SessionStart: {
        tensorboard::Event event;
        event.set_wall_time(queued.wall_time);
        event.set_step(queued.step);
        event.mutable_session_log()->set_status(tensorboard::SessionLog::START);
        return write_record(event);
      }
      case QueuedEvent::Kind::Summary: {
        auto& values = *start_summary(queued.wall_time, queued.step).mutable_value();
        for (const auto& value : queued.values) encode_value(value, *values.Add());
        return write_record(summary_event);
      }
      case QueuedEvent::Kind::Scalars:
        return write_scalars(queued.points);
    }
  } catch (const std::exception& failure) {
    return fmt::format("cannot encode an event for '{}': {}", path, failure.what());
  }
  return {};
}

std::string EventFileWriter::Impl::write_scalars(const std::vector<ScalarPoint>& points) {
  // One event per run of points with the same step.
  for (std::size_t first = 0; first < points.size();) {
    auto& values = *start_summary(points[first].wall_time, points[first].step).mutable_value();
    std::size_t end = first;
    for (; end < points.size() && points[end].step == points[first].step; ++end) {
      auto& value = *values.Add();
      value.set_tag(scalar_tags[points[end].tag]);
      value.set_simple_value(static_cast<float>(points[end].value));
    }
    if (auto problem = write_record(summary_event); !problem.empty()) return problem;
    first = end;
  }
  return {};
}

tensorboard::Summary& EventFileWriter::Impl::start_summary(double wall_time, std::int64_t step) {
  summary_event.set_wall_time(wall_time);
  summary_event.set_step(step);
  auto& summary = *summary_event.mutable_summary();
  summary.mutable_value()->Clear();
  return summary;
}

std::string EventFileWriter::Impl::write_record(const tensorboard::Event& event) {
  // TFRecord: length (8 bytes), its masked CRC (4), the serialized event, its masked CRC (4); all
  // little-endian, built in one reused buffer.
  constexpr std::size_t kHeader = 12;
  record.resize(kHeader);
  if (!event.AppendToString(&record)) {
    return fmt::format("cannot encode an event for '{}': the protobuf does not serialize", path);
  }
  const std::size_t length = record.size() - kHeader;
  store_le(record.data(), length, 8);
  store_le(record.data() + 8, masked_crc(record.data(), 8), 4);
  const std::uint32_t data_crc = masked_crc(record.data() + kHeader, length);
  record.resize(record.size() + 4);
  store_le(record.data() + kHeader + length, data_crc, 4);
  errno = 0;
  if (std::fwrite(record.data(), 1, record.size(), file) != record.size()) {
    return write_error(errno);
  }
  return {};
}

}  // namespace torchbus
