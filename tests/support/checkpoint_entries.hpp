#pragma once

// Test support: a checkpoint with one entry of its payload replaced (or removed) and its framing
// made valid again, as a forger or a writer of another version would leave it.

#include <torch/serialize/archive.h>
#include <support/reframe_checkpoint.hpp>
#include <torchbus/checkpoint_file.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace torchbus::testing {

namespace checkpoint_entries_detail {

/// Writes `value` under `key`: a tensor as the trainer writes one (a buffer), anything else as a
/// value.
inline void write_entry(torch::serialize::OutputArchive& to, const std::string& key,
                        const c10::IValue& value) {
  if (value.isTensor()) {
    to.write(key, value.toTensor(), /*is_buffer=*/true);
  } else {
    to.write(key, value);
  }
}

/// Whether `key` of `archive` is a section: a nested archive, or one the trainer serialized into
/// "<name>_bytes"; reads it into `section` and its name (without "_bytes") into `name`.
inline bool read_section(torch::serialize::InputArchive& archive, const std::string& key,
                         torch::serialize::InputArchive& section, std::string& name) {
  const bool is_bytes = key.size() > 6 && key.compare(key.size() - 6, 6, "_bytes") == 0;
  name = is_bytes ? key.substr(0, key.size() - 6) : key;
  if (archive.try_read(key, section)) return true;
  c10::IValue stored;
  if (!is_bytes || !archive.try_read(key, stored) || !stored.isTensor()) return false;
  const auto bytes = stored.toTensor().contiguous();
  std::istringstream in(std::string(static_cast<const char*>(bytes.data_ptr()), bytes.numel()));
  section.load_from(in);
  return true;
}

/// The payload archive of the checkpoint `file`.
inline torch::serialize::InputArchive payload_archive(const std::filesystem::path& file) {
  std::istringstream in(read_checkpoint_payload(file));
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  return archive;
}

/// Copies `from` into `to`, with the entry `path` ("a/b": entry b of the section a) replaced by
/// `value` (removed when nullopt; added when `from` has none). A section the trainer serialized
/// into "<key>_bytes" is copied as the nested section "<key>", which the reader takes alike.
inline void copy_replacing(torch::serialize::InputArchive& from,
                           torch::serialize::OutputArchive& to, const std::string& path,
                           const std::optional<c10::IValue>& value) {
  const auto slash = path.find('/');
  const auto head = path.substr(0, slash);
  const auto rest = slash == std::string::npos ? std::string() : path.substr(slash + 1);
  bool found = false;
  for (const auto& key : from.keys()) {
    if (key == "training") continue;  // the archive's own module attribute
    torch::serialize::InputArchive nested;
    std::string name;
    if (read_section(from, key, nested, name)) {
      torch::serialize::OutputArchive copy;
      copy_replacing(nested, copy, name == head ? rest : std::string(), value);
      to.write(name, copy);
    } else if (key != path) {
      c10::IValue stored;
      from.read(key, stored);
      write_entry(to, key, stored);
    } else {
      found = true;
      if (value) write_entry(to, key, *value);
    }
  }
  if (!rest.empty() || path.empty() || found || !value) return;
  write_entry(to, path, *value);
}

/// Appends to `paths` the path of every entry of `archive` (sections too, as "<key>/"), each
/// prefixed with `prefix`.
inline void list_entries(torch::serialize::InputArchive& archive, const std::string& prefix,
                         std::vector<std::string>& paths) {
  for (const auto& key : archive.keys()) {
    if (key == "training") continue;
    torch::serialize::InputArchive nested;
    std::string name;
    if (read_section(archive, key, nested, name)) {
      paths.push_back(prefix + name + "/");
      list_entries(nested, prefix + name + "/", paths);
    } else {
      paths.push_back(prefix + key);
    }
  }
}

}  // namespace checkpoint_entries_detail

/// The path of every entry of the checkpoint `file`, as rewrite_checkpoint_entry takes them
/// ("position", "optimizer/state/.../exp_avg"); sections end with '/'.
inline std::vector<std::string> checkpoint_entry_paths(const std::filesystem::path& file) {
  auto archive = checkpoint_entries_detail::payload_archive(file);
  std::vector<std::string> paths;
  checkpoint_entries_detail::list_entries(archive, "", paths);
  return paths;
}

/// Writes to `out` the checkpoint `file` with its entry `path` (e.g. "position", or
/// "callback_2/wait" inside the section of the third callback) replaced by `value`, or removed when
/// `value` is nullopt; its framing and CRC are valid.
inline void rewrite_checkpoint_entry(const std::filesystem::path& file, const std::string& path,
                                     const std::optional<c10::IValue>& value,
                                     const std::filesystem::path& out) {
  const auto payload_size = read_checkpoint_payload(file).size();
  auto archive = checkpoint_entries_detail::payload_archive(file);
  torch::serialize::OutputArchive copy;
  checkpoint_entries_detail::copy_replacing(archive, copy, path, value);
  std::ostringstream bytes;
  copy.save_to(bytes);
  std::ifstream original_file(file, std::ios::binary);
  const std::string original((std::istreambuf_iterator<char>(original_file)),
                             std::istreambuf_iterator<char>());
  std::ofstream(out, std::ios::binary | std::ios::trunc)
      << reframe_checkpoint(original, payload_size, bytes.str());
}

/// The section ("callback_N") that holds the state of the callback `name` in the checkpoint
/// `file`; throws std::runtime_error when it holds none.
inline std::string callback_section(const std::filesystem::path& file, const std::string& name) {
  auto archive = checkpoint_entries_detail::payload_archive(file);
  c10::IValue names;
  archive.read("callback_names", names);
  std::istringstream lines(names.toStringRef());
  std::size_t index = 0;
  for (std::string line; std::getline(lines, line); ++index) {
    if (line == name) return "callback_" + std::to_string(index);
  }
  throw std::runtime_error("the checkpoint holds no state of callback '" + name + "'");
}

}  // namespace torchbus::testing
