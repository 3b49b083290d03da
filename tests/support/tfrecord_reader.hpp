#pragma once

// Test support: reads TensorBoard event files record by record (TFRecord framing, both masked
// CRC-32C checked with Boost.CRC) and parses each record with the `tensorboard.Event` class
// protoc generates from callbacks/proto/tensorboard/event.proto (link torchbus_tensorboard_proto).

#include <tensorboard/event.pb.h>
#include <support/crc32c.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
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

/// The `tensorboard.Event` serialized in `record`; throws TfRecordError when it does not parse.
inline tensorboard::Event parse_event(const std::string& record) {
  tensorboard::Event event;
  if (!event.ParseFromString(record)) throw TfRecordError("a record is not a tensorboard.Event");
  return event;
}

/// Every event of the file at `path`, CRCs checked.
inline std::vector<tensorboard::Event> read_events(const std::filesystem::path& path) {
  std::vector<tensorboard::Event> events;
  for (const auto& record : read_records(file_bytes(path))) events.push_back(parse_event(record));
  return events;
}

/// The event files (`*tfevents*`) in `directory` (not in its subdirectories), sorted by name.
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

/// (step, summary value) of every summary value tagged `tag`, in file order.
inline std::vector<std::pair<std::int64_t, tensorboard::Summary::Value>> values_of(
    const std::vector<tensorboard::Event>& events, const std::string& tag) {
  std::vector<std::pair<std::int64_t, tensorboard::Summary::Value>> out;
  for (const auto& event : events) {
    for (const auto& value : event.summary().value()) {
      if (value.tag() == tag) out.emplace_back(event.step(), value);
    }
  }
  return out;
}

/// (step, value) of every simple value tagged `tag`, in file order.
inline std::vector<std::pair<std::int64_t, float>> scalars_of(
    const std::vector<tensorboard::Event>& events, const std::string& tag) {
  std::vector<std::pair<std::int64_t, float>> out;
  for (const auto& [step, value] : values_of(events, tag)) {
    if (value.has_simple_value()) out.emplace_back(step, value.simple_value());
  }
  return out;
}

/// (step, histogram) of every histogram tagged `tag`, in file order.
inline std::vector<std::pair<std::int64_t, tensorboard::HistogramProto>> histograms_of(
    const std::vector<tensorboard::Event>& events, const std::string& tag) {
  std::vector<std::pair<std::int64_t, tensorboard::HistogramProto>> out;
  for (const auto& [step, value] : values_of(events, tag)) {
    if (value.has_histo()) out.emplace_back(step, value.histo());
  }
  return out;
}

/// The tags of every summary value, each once, in order of appearance.
inline std::vector<std::string> tags_of(const std::vector<tensorboard::Event>& events) {
  std::vector<std::string> tags;
  for (const auto& event : events) {
    for (const auto& value : event.summary().value()) {
      if (std::find(tags.begin(), tags.end(), value.tag()) == tags.end()) {
        tags.push_back(value.tag());
      }
    }
  }
  return tags;
}

}  // namespace torchbus::testing
