#pragma once

/// \file
/// EventFileWriter (private to torchbus_callbacks): TensorBoard event files, TFRecord framing
/// around `tensorboard.Event` protocol buffers (classes generated from
/// callbacks/proto/tensorboard/event.proto), encoded and written on a background thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tensorboard {
class HistogramProto;
}

namespace torchbus {

/// One tagged value of a summary: a scalar, values summarised as a histogram, or a text.
struct SummaryValue {
  /// What the value is.
  enum class Kind : std::uint8_t { Scalar, Histogram, Text };

  /// A scalar `value` under `tag` (stored as a float, as TensorBoard's `simple_value`).
  static SummaryValue scalar(std::string tag, double value);
  /// A histogram of `values` in `buckets` equal-width buckets (computed on the writer thread).
  static SummaryValue histogram(std::string tag, std::vector<double> values, int buckets);
  /// A `markdown` text for TensorBoard's text plugin (a string tensor of one element).
  static SummaryValue text(std::string tag, std::string markdown);

  Kind kind = Kind::Scalar;    ///< scalar, histogram or text
  std::string tag;             ///< TensorBoard tag, e.g. "train/loss"
  double value = 0.0;          ///< Scalar: the value
  std::vector<double> values;  ///< Histogram: the values summarised
  int buckets = 0;             ///< Histogram: equal-width buckets between their min and max
  std::string markdown;        ///< Text: the Markdown
};

/// A scalar of a burst handed to `EventFileWriter::add_scalars`.
struct ScalarPoint {
  std::int64_t step = 0;   ///< the event's step
  double wall_time = 0.0;  ///< the event's time (seconds since 1970)
  std::uint32_t tag = 0;   ///< index into the writer's `scalar_tags`
  double value = 0.0;      ///< the value (stored as a float)
};

/// Fills `histogram` (cleared first) from the finite elements of `values` (NaN and infinities are
/// left out): a leading empty bucket whose limit is the minimum, then `buckets` equal-width
/// buckets up to the maximum. All values equal to x: one bucket (x - 0.5, x + 0.5]. No finite
/// value: `num` 0, one empty bucket.
void fill_histogram(const std::vector<double>& values, int buckets,
                    tensorboard::HistogramProto& histogram);

/// A TensorBoard event file name: `events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n>`, with n
/// counting the names made by this process.
std::string event_file_name();

/// Seconds since 1970-01-01 UTC: the `wall_time` of events.
double wall_time_now();

/// Writes TensorBoard event files, one at a time, on one background thread kept from file to
/// file. The first record of each file, `file_version` "brain.Event:2", is queued when it is
/// opened; `add_*` queue events; the thread encodes them (protobuf, into a message and a buffer
/// reused for every event), frames them (TFRecord: length, masked CRC-32C of the length, data,
/// masked CRC-32C of the data) and writes them, flushing the file whenever the queue runs empty.
/// The thread wakes every 100 ms while a file is open, when the queue is half full, when an
/// `add_*` finds it full, and on `flush` or `close`, so that `add_*` (usually) makes no system call
/// on the caller's thread; between files it sleeps until the next `open`. The queue is bounded:
/// `add_*` blocks while it is full, nothing is dropped. A write error stops the writing into the
/// file; it is thrown (as Error naming the file) once by the next `flush` or `close`, and by every
/// later `add_*`.
class EventFileWriter {
 public:
  /// Events queued at most by default.
  static constexpr std::size_t kDefaultQueueCapacity = 1024;

  /// Creates (or truncates) the file `path` and starts the thread; throws ConfigError naming the
  /// file when it cannot be opened. `queue_capacity` (>= 1) bounds the events waiting to be
  /// written; `scalar_tags` are the tags `add_scalars` refers to by index, in every file.
  explicit EventFileWriter(std::string path, std::size_t queue_capacity = kDefaultQueueCapacity,
                           std::vector<std::string> scalar_tags = {});
  /// Closes the file (an error not yet thrown is logged) and ends the thread.
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  /// After `close`: creates (or truncates) the file `path` and writes into it, with the same
  /// thread, queue capacity and scalar tags. Throws ConfigError naming the file when it cannot be
  /// opened (the writer stays closed), and Error while a file is still open.
  void open(std::string path);
  /// Whether a file is open: from construction or `open` to `close`.
  bool is_open() const;

  /// The file written last. Unlocked: call it on the thread that calls `open`, the only one that
  /// changes it (the writer's thread reads it only while a file is open).
  const std::string& path() const noexcept;

  /// Queues an Event{wall_time, step, summary{values}} (blocks while the queue is full).
  void add_summary(std::int64_t step, std::vector<SummaryValue> values,
                   double wall_time = wall_time_now());
  /// Queues a burst of scalars (one queue entry): each run of consecutive points of one step
  /// becomes an Event{wall_time of its first point, step, summary{scalars}}. Throws ConfigError
  /// for a tag index out of range.
  void add_scalars(std::vector<ScalarPoint> points);
  /// Queues an Event{wall_time, step, session_log{status: START}}: TensorBoard drops the events of
  /// this run directory with a step >= `step` read before it (a restarted run).
  void add_session_start(std::int64_t step, double wall_time = wall_time_now());

  /// Waits until every queued event is written and the file flushed; throws a write error.
  void flush();
  /// Writes what is queued and closes the file; the thread waits for the next `open`. Throws a
  /// write error. Further calls do nothing.
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace torchbus
