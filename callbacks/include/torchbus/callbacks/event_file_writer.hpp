#pragma once

/// \file
/// EventFileWriter: TensorBoard event files (TFRecord framing around hand-encoded
/// `tensorboard.Event` protocol buffers), encoded and written on a background thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torchbus {

/// One tagged value of a summary: a scalar, or values summarised as a histogram.
struct SummaryValue {
  /// What the value is.
  enum class Kind : std::uint8_t { Scalar, Histogram };

  /// A scalar `value` under `tag` (stored as a float, as TensorBoard's `simple_value`).
  static SummaryValue scalar(std::string tag, double value);
  /// A histogram of `values` in `buckets` equal-width buckets (computed on the writer thread).
  static SummaryValue histogram(std::string tag, std::vector<double> values, int buckets);

  Kind kind = Kind::Scalar;    ///< scalar or histogram
  std::string tag;             ///< TensorBoard tag, e.g. "train/loss"
  double value = 0.0;          ///< Scalar: the value
  std::vector<double> values;  ///< Histogram: the values summarised
  int buckets = 0;             ///< Histogram: equal-width buckets between their min and max
};

/// TensorBoard's `HistogramProto`: statistics and parallel bucket arrays.
struct Histogram {
  double min = 0.0;                  ///< smallest finite value
  double max = 0.0;                  ///< largest finite value
  double num = 0.0;                  ///< number of finite values
  double sum = 0.0;                  ///< their sum
  double sum_squares = 0.0;          ///< the sum of their squares
  std::vector<double> bucket_limit;  ///< right edge of each bucket (ascending)
  std::vector<double> bucket;        ///< values in each bucket (left edge: the previous limit)
};

/// Histogram of the finite elements of `values` (NaN and infinities are left out): a leading empty
/// bucket whose limit is the minimum, then `buckets` equal-width buckets up to the maximum. All
/// values equal to x: one bucket (x - 0.5, x + 0.5]. No finite value: `num` 0, one empty bucket.
Histogram make_histogram(const std::vector<double>& values, int buckets);

/// A TensorBoard event file name: `events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n>`, with n
/// counting the names made by this process.
std::string event_file_name();

/// Seconds since 1970-01-01 UTC: the `wall_time` of events.
double wall_time_now();

/// Writes one TensorBoard event file. The first record, `file_version` "brain.Event:2", is queued
/// at construction; `add_*` queue events; a background thread encodes them (protobuf), frames them
/// (TFRecord: length, masked CRC-32C of the length, data, masked CRC-32C of the data) and writes
/// them, flushing the file whenever the queue runs empty. The thread wakes every 100 ms, when the
/// queue is half full, and on `flush` or `close`, so that `add_*` (usually) makes no system call
/// on the caller's thread. The queue is bounded: `add_*` blocks while it is full, nothing is
/// dropped. A write error stops the writing; it is thrown (as Error naming the file) once by the
/// next `flush` or `close`, and by every later `add_*`.
class EventFileWriter {
 public:
  /// Events queued at most by default.
  static constexpr std::size_t kDefaultQueueCapacity = 1024;

  /// Creates (or truncates) the file `path`; throws ConfigError naming it when it cannot be opened.
  /// `queue_capacity` (>= 1) bounds the events waiting to be written.
  explicit EventFileWriter(std::string path, std::size_t queue_capacity = kDefaultQueueCapacity);
  /// Closes the file; an error not yet thrown is logged.
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  /// The file written.
  const std::string& path() const noexcept;

  /// Queues an Event{wall_time, step, summary{values}} (blocks while the queue is full).
  void add_summary(std::int64_t step, std::vector<SummaryValue> values,
                   double wall_time = wall_time_now());
  /// Queues an Event{wall_time, step, session_log{status: START}}: TensorBoard drops the events of
  /// this run directory with a step >= `step` read before it (a restarted run).
  void add_session_start(std::int64_t step, double wall_time = wall_time_now());

  /// Waits until every queued event is written and the file flushed; throws a write error.
  void flush();
  /// Flushes, stops the thread and closes the file; throws a write error. Further calls do nothing.
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace torchbus
