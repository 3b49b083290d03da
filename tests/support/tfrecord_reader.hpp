#pragma once

// Test support: reads TensorBoard event files record by record (TFRecord framing, both masked
// CRC-32C checked) and decodes `tensorboard.Event` protocol buffers, independently of the writer.

#include <torchbus/crc32c.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace torchbus::testing {

/// A malformed event file: bad framing, a CRC mismatch, a protobuf that does not parse.
struct TfRecordError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// TFRecord's masked CRC-32C of `size` bytes.
inline std::uint32_t masked_crc32c(const char* data, std::size_t size) {
  const std::uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/// Reads `bytes` little-endian bytes at `data`.
inline std::uint64_t read_le(const char* data, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= static_cast<std::uint64_t>(static_cast<unsigned char>(data[i])) << (8 * i);
  }
  return value;
}

/// The whole content of `path`.
inline std::string file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

/// The payloads of the TFRecords in `bytes`; throws TfRecordError naming the record and the
/// problem.
inline std::vector<std::string> read_records(const std::string& bytes) {
  std::vector<std::string> records;
  std::size_t at = 0;
  while (at < bytes.size()) {
    const std::string which = "record " + std::to_string(records.size());
    if (bytes.size() - at < 12) throw TfRecordError(which + ": truncated header");
    const std::uint64_t length = read_le(&bytes[at], 8);
    if (read_le(&bytes[at + 8], 4) != masked_crc32c(&bytes[at], 8)) {
      throw TfRecordError(which + ": length CRC mismatch");
    }
    at += 12;
    if (bytes.size() - at < length + 4) throw TfRecordError(which + ": truncated data");
    if (read_le(&bytes[at + length], 4) != masked_crc32c(&bytes[at], length)) {
      throw TfRecordError(which + ": data CRC mismatch");
    }
    records.emplace_back(bytes, at, length);
    at += length + 4;
  }
  return records;
}

/// One field of a protobuf message: a varint or fixed-width number, or length-delimited bytes.
struct ProtoField {
  int number = 0;
  int wire_type = 0;
  std::uint64_t value = 0;  ///< wire types 0 (varint), 1 (fixed64), 5 (fixed32)
  std::string bytes;        ///< wire type 2
};

/// The fields of the protobuf `message`, in order.
inline std::vector<ProtoField> decode_proto(const std::string& message) {
  std::vector<ProtoField> fields;
  std::size_t at = 0;
  auto varint = [&] {
    std::uint64_t value = 0;
    for (int shift = 0;; shift += 7) {
      if (at >= message.size() || shift > 63) throw TfRecordError("protobuf: bad varint");
      const auto byte = static_cast<unsigned char>(message[at++]);
      value |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
  };
  auto need = [&](std::size_t count) {
    if (message.size() - at < count) throw TfRecordError("protobuf: truncated field");
  };
  while (at < message.size()) {
    ProtoField field;
    const std::uint64_t key = varint();
    field.number = static_cast<int>(key >> 3);
    field.wire_type = static_cast<int>(key & 7);
    switch (field.wire_type) {
      case 0:
        field.value = varint();
        break;
      case 1:
        need(8);
        field.value = read_le(&message[at], 8);
        at += 8;
        break;
      case 5:
        need(4);
        field.value = read_le(&message[at], 4);
        at += 4;
        break;
      case 2: {
        const std::uint64_t length = varint();
        need(length);
        field.bytes = message.substr(at, length);
        at += length;
        break;
      }
      default:
        throw TfRecordError("protobuf: unsupported wire type " + std::to_string(field.wire_type));
    }
    fields.push_back(std::move(field));
  }
  return fields;
}

/// A fixed64 field as a double.
inline double as_double(const ProtoField& field) {
  double value = 0;
  std::memcpy(&value, &field.value, sizeof(value));
  return value;
}

/// A fixed32 field as a float.
inline float as_float(const ProtoField& field) {
  const auto bits = static_cast<std::uint32_t>(field.value);
  float value = 0;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

/// A decoded `HistogramProto`.
struct HistogramRead {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit, bucket;
};

/// A decoded `Summary.Value`: a tag with a simple value or a histogram.
struct SummaryValueRead {
  std::string tag;
  std::optional<float> simple_value;
  std::optional<HistogramRead> histo;
};

/// A decoded `Event`.
struct EventRead {
  double wall_time = 0;
  std::int64_t step = 0;
  std::string file_version;
  bool has_summary = false;
  std::vector<SummaryValueRead> values;
  std::optional<std::int64_t> session_status;  ///< SessionLog.status (1: START)
};

/// Packed (or repeated) doubles of a field.
inline void append_doubles(std::vector<double>& out, const ProtoField& field) {
  if (field.wire_type == 1) {
    out.push_back(as_double(field));
    return;
  }
  if (field.bytes.size() % 8 != 0) throw TfRecordError("protobuf: packed doubles of bad size");
  for (std::size_t i = 0; i < field.bytes.size(); i += 8) {
    const std::uint64_t bits = read_le(&field.bytes[i], 8);
    double value = 0;
    std::memcpy(&value, &bits, sizeof(value));
    out.push_back(value);
  }
}

/// Decodes a `HistogramProto` (tensorboard/compat/proto/histogram.proto).
inline HistogramRead decode_histogram(const std::string& message) {
  HistogramRead histogram;
  for (const auto& field : decode_proto(message)) {
    switch (field.number) {
      case 1:
        histogram.min = as_double(field);
        break;
      case 2:
        histogram.max = as_double(field);
        break;
      case 3:
        histogram.num = as_double(field);
        break;
      case 4:
        histogram.sum = as_double(field);
        break;
      case 5:
        histogram.sum_squares = as_double(field);
        break;
      case 6:
        append_doubles(histogram.bucket_limit, field);
        break;
      case 7:
        append_doubles(histogram.bucket, field);
        break;
      default:
        break;
    }
  }
  return histogram;
}

/// Decodes an `Event` (tensorboard/compat/proto/event.proto and summary.proto).
inline EventRead decode_event(const std::string& message) {
  EventRead event;
  for (const auto& field : decode_proto(message)) {
    if (field.number == 1 && field.wire_type == 1) {
      event.wall_time = as_double(field);
    } else if (field.number == 2 && field.wire_type == 0) {
      event.step = static_cast<std::int64_t>(field.value);
    } else if (field.number == 3 && field.wire_type == 2) {
      event.file_version = field.bytes;
    } else if (field.number == 5 && field.wire_type == 2) {
      event.has_summary = true;
      for (const auto& value_field : decode_proto(field.bytes)) {
        if (value_field.number != 1) continue;
        SummaryValueRead value;
        for (const auto& part : decode_proto(value_field.bytes)) {
          if (part.number == 1) value.tag = part.bytes;
          if (part.number == 2 && part.wire_type == 5) value.simple_value = as_float(part);
          if (part.number == 5) value.histo = decode_histogram(part.bytes);
        }
        event.values.push_back(std::move(value));
      }
    } else if (field.number == 7 && field.wire_type == 2) {
      event.session_status = 0;
      for (const auto& part : decode_proto(field.bytes)) {
        if (part.number == 1) event.session_status = static_cast<std::int64_t>(part.value);
      }
    }
  }
  return event;
}

/// Every event of the file at `path`, CRCs checked.
inline std::vector<EventRead> read_events(const std::filesystem::path& path) {
  std::vector<EventRead> events;
  for (const auto& record : read_records(file_bytes(path))) events.push_back(decode_event(record));
  return events;
}

/// The event files (`*tfevents*`) in `directory`, sorted by name.
inline std::vector<std::filesystem::path> event_files(const std::filesystem::path& directory) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (entry.path().filename().string().find("tfevents") != std::string::npos) {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

/// (step, value) of every simple value tagged `tag`, in file order.
inline std::vector<std::pair<std::int64_t, float>> scalars_of(const std::vector<EventRead>& events,
                                                              const std::string& tag) {
  std::vector<std::pair<std::int64_t, float>> out;
  for (const auto& event : events) {
    for (const auto& value : event.values) {
      if (value.tag == tag && value.simple_value) out.emplace_back(event.step, *value.simple_value);
    }
  }
  return out;
}

/// (step, histogram) of every histogram tagged `tag`, in file order.
inline std::vector<std::pair<std::int64_t, HistogramRead>> histograms_of(
    const std::vector<EventRead>& events, const std::string& tag) {
  std::vector<std::pair<std::int64_t, HistogramRead>> out;
  for (const auto& event : events) {
    for (const auto& value : event.values) {
      if (value.tag == tag && value.histo) out.emplace_back(event.step, *value.histo);
    }
  }
  return out;
}

/// The tags of every summary value, each once, in order of appearance.
inline std::vector<std::string> tags_of(const std::vector<EventRead>& events) {
  std::vector<std::string> tags;
  for (const auto& event : events) {
    for (const auto& value : event.values) {
      if (std::find(tags.begin(), tags.end(), value.tag) == tags.end()) tags.push_back(value.tag);
    }
  }
  return tags;
}

}  // namespace torchbus::testing
