#include <spdlog/spdlog.h>
#include <torchbus/atomic_file.hpp>
#include <torchbus/checkpoint_file.hpp>
#include <torchbus/error.hpp>
#include <torchbus/logging.hpp>

#include "checkpoint/format.hpp"
#include "support/crc32c.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <vector>

namespace torchbus {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'T', 'B', 'C', 'K', 'P', 'T', '\r', '\n'};
// Version 2: magic, version, step, identity size, identity, payload size, CRC of all before it
// and of the payload. Version 1: magic, version, step, payload size, CRC of the payload only.
constexpr std::size_t kFixedHeaderSize = 8 + 4 + 8 + 4 + 8 + 4;
constexpr std::size_t kVersion1HeaderSize = 8 + 4 + 8 + 8 + 4;
constexpr std::size_t kMaxIdentitySize = 1 << 20;

template <typename Integer>
void put(std::string& out, Integer value) {
  for (std::size_t i = 0; i < sizeof(Integer); ++i) {
    out.push_back(static_cast<char>((static_cast<std::uint64_t>(value) >> (8 * i)) & 0xFF));
  }
}

template <typename Integer>
Integer get(const char* in) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < sizeof(Integer); ++i) {
    value |= static_cast<std::uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  }
  return static_cast<Integer>(value);
}

}  // namespace

std::string frame_checkpoint(const std::string& payload, std::int64_t step,
                             const std::string& identity) {
  std::string framed(kMagic, sizeof(kMagic));
  framed.reserve(kFixedHeaderSize + identity.size() + payload.size());
  put<std::uint32_t>(framed, kCheckpointFormatVersion);
  put<std::int64_t>(framed, step);
  put<std::uint32_t>(framed, static_cast<std::uint32_t>(identity.size()));
  framed += identity;
  put<std::uint64_t>(framed, payload.size());
  Crc32c crc;
  crc.process_bytes(framed.data(), framed.size());
  crc.process_bytes(payload.data(), payload.size());
  put<std::uint32_t>(framed, crc.checksum());
  framed += payload;
  return framed;
}

std::string read_checkpoint_payload(const fs::path& path, CheckpointHeader* header) {
  std::ifstream in(path, std::ios::binary);
  TORCHBUS_CHECK(in.good(), CheckpointError, "cannot open checkpoint ", path.string(),
                 fs::exists(path) ? " (unreadable)" : " (no such file)");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TORCHBUS_CHECK(bytes.size() >= kVersion1HeaderSize && std::memcmp(bytes.data(), kMagic, 8) == 0,
                 CheckpointError, "checkpoint ", path.string(),
                 " is not a torchbus checkpoint (no header; truncated to ", bytes.size(),
                 " bytes or another kind of file)");
  const auto version = get<std::uint32_t>(bytes.data() + 8);
  TORCHBUS_CHECK(version == 1 || version == kCheckpointFormatVersion, CheckpointError,
                 "checkpoint ", path.string(), " has format version ", version,
                 "; this torchbus reads versions 1 to ", kCheckpointFormatVersion);
  std::size_t offset = 20;
  std::string identity;
  if (version >= 2) {
    const auto identity_size = get<std::uint32_t>(bytes.data() + offset);
    TORCHBUS_CHECK(
        identity_size <= kMaxIdentitySize && bytes.size() >= kFixedHeaderSize + identity_size,
        CheckpointError, "checkpoint ", path.string(),
        " is corrupt or truncated: its header announces a run identity of ", identity_size,
        " bytes in a file of ", bytes.size());
    identity = bytes.substr(offset + 4, identity_size);
    offset += 4 + identity_size;
  }
  const auto size = get<std::uint64_t>(bytes.data() + offset);
  const auto header_size = offset + 8 + 4;
  TORCHBUS_CHECK(bytes.size() - header_size == size, CheckpointError, "checkpoint ", path.string(),
                 " is truncated or padded: its header announces ", size,
                 " payload bytes, the file holds ", bytes.size() - header_size);
  const auto expected_crc = get<std::uint32_t>(bytes.data() + offset + 8);
  Crc32c checksum;  // version 1 covers the payload, version 2 the header too
  if (version >= 2) checksum.process_bytes(bytes.data(), offset + 8);
  checksum.process_bytes(bytes.data() + header_size, size);
  const auto crc = checksum.checksum();
  TORCHBUS_CHECK(crc == expected_crc, CheckpointError, "checkpoint ", path.string(),
                 " is corrupt: its CRC-32C is ", crc, ", the header says ", expected_crc);
  if (header != nullptr) {
    header->format_version = version;
    header->step = get<std::int64_t>(bytes.data() + 12);
    header->identity = std::move(identity);
  }
  return bytes.substr(header_size);
}

void write_checkpoint_file(const fs::path& path, std::string_view bytes) {
  try {
    write_file_atomically(path, bytes);
  } catch (const Error& failure) {
    throw CheckpointError(failure.what());  // it names the file and the system's reason
  }
}

std::vector<CheckpointCandidate> valid_checkpoints(const fs::path& directory,
                                                   std::vector<std::string>* skipped) {
  std::vector<CheckpointCandidate> found;
  const auto skip = [&](const std::string& why) {
    logger()->warn("skipping checkpoint: {}", why);
    if (skipped != nullptr) skipped->push_back(why);
  };
  std::error_code error;
  fs::directory_iterator entries(directory, error);
  for (; !error && entries != fs::directory_iterator(); entries.increment(error)) {
    const auto& path = entries->path();
    if (path.extension() != kCheckpointExtension) continue;
    // Symbolic links (ModelCheckpoint's `last` link, a loop of them) are never followed: what
    // they point at is listed itself. Other odd entries (a directory, a device) are skipped.
    std::error_code status_error;
    const auto status = fs::symlink_status(path, status_error);
    if (!status_error && fs::is_symlink(status)) continue;
    if (status_error || !fs::is_regular_file(status)) {
      skip(detail::concat(path.string(), " is not a regular file (",
                          status_error ? status_error.message() : "a directory, device or pipe",
                          ")"));
      continue;
    }
    CheckpointCandidate candidate{path, {}};
    try {
      read_checkpoint_payload(candidate.path, &candidate.header);
    } catch (const CheckpointError& failure) {
      skip(failure.what());
      continue;
    }
    found.push_back(std::move(candidate));
  }
  std::vector<std::pair<fs::file_time_type, std::size_t>> order;
  for (std::size_t i = 0; i < found.size(); ++i) {
    order.emplace_back(fs::last_write_time(found[i].path, error), i);
  }
  std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    const auto step_a = found[a.second].header.step, step_b = found[b.second].header.step;
    return step_a != step_b ? step_a > step_b : a.first > b.first;
  });
  std::vector<CheckpointCandidate> sorted;
  for (const auto& [time, index] : order) sorted.push_back(std::move(found[index]));
  return sorted;
}

std::optional<fs::path> newest_valid_checkpoint(const fs::path& directory) {
  auto candidates = valid_checkpoints(directory);
  if (candidates.empty()) return std::nullopt;
  return candidates.front().path;
}

std::string identity_differences(const std::string& checkpoint, const std::string& run) {
  auto parse = [](const std::string& text) {
    std::map<std::string, std::string> values;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      const auto equals = line.find('=');
      if (equals != std::string::npos) values[line.substr(0, equals)] = line.substr(equals + 1);
    }
    return values;
  };
  const auto before = parse(checkpoint), now = parse(run);
  std::string out;
  auto value_in = [](const std::map<std::string, std::string>& values, const std::string& key) {
    const auto found = values.find(key);
    return found == values.end() ? std::string("(none)") : found->second;
  };
  std::set<std::string> keys;
  for (const auto& [key, value] : before) keys.insert(key);
  for (const auto& [key, value] : now) keys.insert(key);
  for (const auto& key : keys) {
    const auto a = value_in(before, key), b = value_in(now, key);
    if (a != b) out += detail::concat(out.empty() ? "" : "; ", key, ": ", a, " -> ", b);
  }
  if (out.empty() && checkpoint != run) out = "the identity text differs";
  return out;
}

CheckpointWriter::CheckpointWriter(std::size_t max_pending) : max_pending_(max_pending) {
  TORCHBUS_CHECK(max_pending >= 1, ConfigError,
                 "a CheckpointWriter needs room for at least one pending write, got 0");
}

CheckpointWriter::~CheckpointWriter() {
  while (!pending_.empty()) {
    try {
      finish_oldest();
    } catch (const std::exception& error) {
      logger()->error("background checkpoint write failed: {}", error.what());
    }
  }
}

void CheckpointWriter::write(CheckpointSnapshot snapshot, std::function<void()> after_durable) {
  wait_for_room();
  // Each write waits for the one before it (whose failure does not stop it): files appear, links
  // move and older files go in the order the checkpoints were taken.
  std::shared_future<void> before = pending_.empty() ? std::shared_future<void>() : pending_.back();
  pending_.push_back(
      std::async(std::launch::async, [before = std::move(before), snapshot = std::move(snapshot),
                                      after = std::move(after_durable)]() mutable {
        if (before.valid()) before.wait();
        const auto& path = snapshot.path();
        try {
          write_checkpoint_file(path, snapshot.bytes());
          if (after) after();
        } catch (const std::exception& error) {
          throw CheckpointError(detail::concat("the background write of checkpoint ", path.string(),
                                               " failed: ", error.what()));
        }
      }).share());
}

void CheckpointWriter::finish_oldest() {
  const auto oldest = std::move(pending_.front());
  pending_.pop_front();
  oldest.get();
}

void CheckpointWriter::wait_for_room() {
  while (pending_.size() >= max_pending_) finish_oldest();
}

void CheckpointWriter::flush() {
  while (!pending_.empty()) finish_oldest();
}

void CheckpointWriter::rethrow_if_failed() {
  while (!pending_.empty() &&
         pending_.front().wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    finish_oldest();
  }
}

}  // namespace torchbus
