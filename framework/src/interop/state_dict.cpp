#include <torchbus/atomic_file.hpp>
#include <torchbus/error.hpp>
#include <torchbus/state_dict.hpp>

#include <ATen/quantized/QTensorImpl.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/unpickler.h>
#include <torch/utils.h>

#include "interop/state_dict_pickle.hpp"
#include "interop/zip_directory.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>

namespace torchbus {
namespace {

namespace fs = std::filesystem;

// The first bytes of a zip archive's first local file header.
constexpr char kZipMagic[4] = {'P', 'K', '\x03', '\x04'};

CheckpointError file_error(const fs::path& path, const std::string& what) {
  return CheckpointError(detail::concat(path.string(), ": ", what));
}

bool starts_like_zip(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[sizeof(kZipMagic)] = {};
  in.read(magic, sizeof(magic));
  return in.gcount() == sizeof(magic) && std::memcmp(magic, kZipMagic, sizeof(magic)) == 0;
}

std::string record(caffe2::serialize::PyTorchStreamReader& reader, const std::string& name) {
  auto [data, size] = reader.getRecord(name);
  return std::string(static_cast<const char*>(data.get()), size);
}

// The dict a state_dict pickle holds, checked to map strings to tensors.
NamedTensors named_tensors(const c10::IValue& value) {
  TORCHBUS_CHECK(value.isGenericDict(), DataError, "it holds a ", value.tagKind(),
                 ", not a dict of str -> tensor");
  NamedTensors tensors;
  for (const auto& entry : value.toGenericDict()) {
    TORCHBUS_CHECK(entry.key().isString(), DataError, "a key is a ", entry.key().tagKind(),
                   ", not a str: not a dict of str -> tensor");
    const auto& name = entry.key().toStringRef();
    TORCHBUS_CHECK(entry.value().isTensor(), DataError, "'", name, "' holds a ",
                   entry.value().tagKind(), ", not a tensor: not a dict of str -> tensor");
    tensors.emplace_back(name, entry.value().toTensor());
  }
  return tensors;
}

// The bytes of its storage `tensor` reaches: up to its last element (0 when it has none); none
// when its offset or a stride is negative, or the reach overflows (a damaged or forged file).
std::optional<std::uint64_t> bytes_reached(const at::Tensor& tensor) {
  if (tensor.numel() == 0) return 0;
  std::uint64_t last = 0;
  if (tensor.storage_offset() < 0) return std::nullopt;
  last = static_cast<std::uint64_t>(tensor.storage_offset());
  for (std::int64_t dim = 0; dim < tensor.dim(); ++dim) {
    if (tensor.stride(dim) < 0) return std::nullopt;
    std::uint64_t step = 0;  // sizes are >= 1 here: the tensor has elements
    if (__builtin_mul_overflow(static_cast<std::uint64_t>(tensor.size(dim) - 1),
                               static_cast<std::uint64_t>(tensor.stride(dim)), &step) ||
        __builtin_add_overflow(last, step, &last)) {
      return std::nullopt;
    }
  }
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(last + 1, static_cast<std::uint64_t>(tensor.element_size()), &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

/// `text` in lower case (ASCII): miniz, LibTorch's zip reader, finds records case-insensitively.
std::string lower_case(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

/// The archive's records as its central directory lists them, found as PyTorchStreamReader finds
/// them: in the folder of the first record, case-insensitively.
class ArchiveRecords {
 public:
  explicit ArchiveRecords(const fs::path& path) : path_(path) {
    std::vector<detail::ZipEntry> entries;
    try {
      entries = detail::read_zip_directory(path);
    } catch (const DataError& error) {
      throw file_error(path, detail::concat("a damaged zip archive: ", error.what()));
    }
    if (!entries.empty()) folder_ = entries.front().name.substr(0, entries.front().name.find('/'));
    for (auto& entry : entries) {
      const auto key = lower_case(entry.name);
      if (!by_name_.emplace(key, std::move(entry)).second) {
        // Which of the two LibTorch's reader reads is not defined: neither can be checked.
        throw file_error(path, detail::concat("the zip archive lists '", key,
                                              "' twice (letter case aside): damaged or forged"));
      }
    }
  }

  /// Throws when the `size` bytes at `data` that the reader gave for record `name` are not what
  /// the archive recorded: LibTorch's reader checks no CRC, so a damaged byte would load as a
  /// weight.
  void check(const std::string& name, const void* data, std::size_t size) const {
    const auto found = by_name_.find(lower_case(folder_ + '/' + name));
    if (found == by_name_.end()) {
      throw file_error(path_, detail::concat("record '", folder_, '/', name,
                                             "' is not in the zip archive's central directory"));
    }
    const auto& entry = found->second;
    // torch.save with torch.serialization.set_crc32_options(False) records 0.
    if (entry.crc32 == 0) return;
    const auto crc = detail::zip_crc32(data, size);
    if (size != entry.size || crc != entry.crc32) {
      throw file_error(path_, detail::concat("record '", entry.name, "' is damaged: its ", size,
                                             " bytes have CRC-32 ", crc, ", the archive records ",
                                             entry.size, " bytes of CRC-32 ", entry.crc32));
    }
  }

 private:
  fs::path path_;
  std::string folder_;  // the first record's, as LibTorch's reader takes it
  std::map<std::string, detail::ZipEntry> by_name_;  // by lower-case name
};

NamedTensors read_archive(const fs::path& path) {
  caffe2::serialize::PyTorchStreamReader reader(path.string());
  const ArchiveRecords records(path);
  if (reader.hasRecord("constants.pkl")) {
    throw file_error(path,
                     "a TorchScript archive (torch.jit.save, torch::save of a module), not a "
                     "state_dict: save model.state_dict() with torch.save");
  }
  if (!reader.hasRecord("data.pkl")) {
    throw file_error(path, "a zip archive without data.pkl: not written by torch.save");
  }
  const std::string data_pkl = record(reader, "data.pkl");
  records.check("data.pkl", data_pkl.data(), data_pkl.size());
  const std::string pickle = detail::unpicklable_state_dict(data_pkl);
  std::map<const void*, std::size_t> record_sizes;  // by the address of each record's memory
  std::size_t position = 0;
  torch::jit::Unpickler unpickler(
      [&](char* buffer, std::size_t wanted) {
        const std::size_t count = std::min(wanted, pickle.size() - position);
        std::memcpy(buffer, pickle.data() + position, count);
        position += count;
        return count;
      },
      nullptr, nullptr,
      [&](const std::string& key) {
        auto [data, size] = reader.getRecord("data/" + key);
        records.check("data/" + key, data.get(), size);
        record_sizes[data.get()] = size;
        return std::move(data);
      },
      c10::Device(c10::kCPU));
  auto tensors = named_tensors(unpickler.parse_ivalue());
  // The unpickler trusts the sizes the pickle gives: a damaged or forged file could make a
  // storage claim more bytes than its record holds, or a tensor reach past its storage.
  for (const auto& [name, tensor] : tensors) {
    // torch.save writes a quantized tensor with its scale and zero point (_rebuild_qtensor); a
    // quantized storage read as a plain tensor has none, and LibTorch asserts on its first use.
    if (tensor.is_quantized() && dynamic_cast<const at::UnknownQuantizer*>(
                                     at::get_qtensorimpl(tensor)->quantizer().get()) != nullptr) {
      throw file_error(path,
                       detail::concat("'", name, "' is a quantized tensor (", tensor.scalar_type(),
                                      ") without its scale and zero point (the file is "
                                      "damaged or forged)"));
    }
    const auto found = record_sizes.find(tensor.storage().data());
    const std::size_t available = found == record_sizes.end() ? 0 : found->second;
    const std::size_t claimed = tensor.storage().nbytes();
    if (claimed > available) {
      throw file_error(path, detail::concat("'", name, "' has a storage of ", claimed,
                                            " bytes, but its data record holds ", available,
                                            " (the file is damaged or forged)"));
    }
    const auto reached = bytes_reached(tensor);
    if (!reached) {
      throw file_error(path, detail::concat("'", name,
                                            "' has a negative storage offset or "
                                            "stride, or a reach beyond 2^64 bytes (the file is "
                                            "damaged or forged)"));
    }
    if (*reached > claimed) {
      throw file_error(path, detail::concat("'", name, "' reaches ", *reached,
                                            " bytes into its storage, which holds ", claimed,
                                            " (the file is damaged or forged)"));
    }
  }
  return tensors;
}

std::string shape_text(const at::Tensor& tensor) {
  return detail::concat(tensor.sizes());
}

}  // namespace

NamedTensors state_dict_of(const torch::nn::Module& module) {
  NamedTensors tensors;
  for (const auto& parameter : module.named_parameters()) {
    tensors.emplace_back(parameter.key(), parameter.value());
  }
  for (const auto& buffer : module.named_buffers()) {
    tensors.emplace_back(buffer.key(), buffer.value());
  }
  return tensors;
}

std::string state_dict_bytes(const NamedTensors& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : tensors) dict.insert(name, tensor.detach().cpu());
  std::string pickle;
  torch::jit::Pickler pickler(
      [&](const char* data, std::size_t size) { pickle.append(data, size); }, nullptr, nullptr,
      nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(dict);
  pickler.stop();

  std::string archive;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, std::size_t size) {
    archive.append(static_cast<const char*>(data), size);
    return size;
  });
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  const auto& storages = pickler.tensorData();
  for (std::size_t index = 0; index < storages.size(); ++index) {
    const auto data = torch::jit::getWriteableTensorData(storages[index], /*to_cpu=*/true);
    writer.writeRecord("data/" + std::to_string(index), data.data(), data.sizeInBytes());
  }
  writer.writeEndOfFile();
  return archive;
}

void save_state_dict(const torch::nn::Module& module, const fs::path& path) {
  std::string bytes;
  try {
    bytes = state_dict_bytes(state_dict_of(module));
  } catch (const c10::Error& error) {
    throw file_error(
        path, detail::concat("cannot serialize the state_dict: ", detail::first_line(error)));
  }
  try {
    write_file_atomically(path, bytes);
  } catch (const Error& error) {
    throw CheckpointError(error.what());
  }
}

NamedTensors read_state_dict(const fs::path& path) {
  std::error_code error_code;
  const auto status = fs::status(path, error_code);
  if (!fs::exists(status)) {
    throw file_error(path, "no such file (expected a state_dict saved by torch.save)");
  }
  if (!fs::is_regular_file(status)) {
    throw file_error(path, "not a regular file (expected a state_dict saved by torch.save)");
  }
  if (!starts_like_zip(path)) {
    throw file_error(path,
                     "not a zip archive: state_dicts are read in torch.save's format since "
                     "PyTorch 1.6 (not the legacy _use_new_zipfile_serialization=False format)");
  }
  try {
    return read_archive(path);
  } catch (const DataError& error) {
    throw file_error(path, detail::concat("not a state_dict: ", error.what()));
  } catch (const Error&) {
    throw;  // names the file already
  } catch (const c10::Error& error) {
    throw file_error(path,
                     detail::concat("cannot be read as a state_dict (truncated or corrupt?): ",
                                    detail::first_line(error)));
  } catch (const std::exception& error) {
    // LibTorch's unpickler also throws std::runtime_error (a key it cannot hash) and others.
    throw file_error(path, detail::concat("cannot be read as a state_dict (damaged or forged?): ",
                                          detail::first_line(error)));
  }
}

void load_state_dict(torch::nn::Module& module, const fs::path& path, bool strict) {
  const NamedTensors file_tensors = read_state_dict(path);
  std::map<std::string, const at::Tensor*> in_file;
  for (const auto& [name, tensor] : file_tensors) in_file.emplace(name, &tensor);

  const NamedTensors targets = state_dict_of(module);
  std::vector<std::string> missing;
  std::vector<std::string> mismatches;
  std::vector<std::pair<at::Tensor, const at::Tensor*>> copies;
  for (const auto& [name, target] : targets) {
    const auto found = in_file.find(name);
    if (found == in_file.end()) {
      missing.push_back(name);
      continue;
    }
    const at::Tensor& source = *found->second;
    if (!source.sizes().equals(target.sizes())) {
      mismatches.push_back(detail::concat("size mismatch for ", name, ": ", shape_text(source),
                                          " in the file, ", shape_text(target), " in the model"));
    } else if (source.scalar_type() != target.scalar_type()) {
      mismatches.push_back(detail::concat("dtype mismatch for ", name, ": ", source.scalar_type(),
                                          " in the file, ", target.scalar_type(), " in the model"));
    } else {
      copies.emplace_back(target, found->second);
    }
    in_file.erase(found);
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, tensor] : file_tensors) {
    if (in_file.count(name) > 0) unexpected.push_back(name);
  }

  const bool key_errors = strict && !(missing.empty() && unexpected.empty());
  if (key_errors || !mismatches.empty()) {
    std::string message = "error(s) loading the state_dict";
    if (strict && !missing.empty()) message += "; missing keys: " + detail::join_or_none(missing);
    if (strict && !unexpected.empty()) {
      message += "; unexpected keys: " + detail::join_or_none(unexpected);
    }
    for (const auto& mismatch : mismatches) message += "; " + mismatch;
    throw file_error(path, message + "; nothing was loaded");
  }
  torch::NoGradGuard no_grad;
  for (auto& [target, source] : copies) target.copy_(*source);
}

}  // namespace torchbus
