#include "dataset.hpp"

#include <torchbus/error.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

namespace train {

using torchbus::ConfigError;
using torchbus::DataError;
using torchbus::detail::concat;

Dataset synthetic_dataset(std::int64_t train_size, std::int64_t validation_size,
                          std::int64_t features, std::int64_t classes, std::uint64_t seed) {
  auto generator = at::detail::createCPUGenerator(seed);
  const auto centres = at::randn({classes, features}, generator) * 0.3;
  auto sample = [&](std::int64_t count) {
    auto targets = at::randint(classes, {count}, generator, at::kLong);
    auto inputs = centres.index_select(0, targets) + at::randn({count, features}, generator);
    return std::make_pair(inputs, targets);
  };
  Dataset dataset;
  std::tie(dataset.train_inputs, dataset.train_targets) = sample(train_size);
  std::tie(dataset.validation_inputs, dataset.validation_targets) = sample(validation_size);
  dataset.classes = classes;
  dataset.description =
      concat("synthetic: ", train_size, " train / ", validation_size, " validation samples, ",
             features, " features, ", classes, " classes (seed ", seed, ")");
  return dataset;
}

namespace {

/// What kind of file system entry `status` describes, for a message ("a directory", "a FIFO").
std::string entry_kind(const std::filesystem::file_status& status) {
  switch (status.type()) {
    case std::filesystem::file_type::directory:
      return "a directory";
    case std::filesystem::file_type::character:
      return "a character device";
    case std::filesystem::file_type::block:
      return "a block device";
    case std::filesystem::file_type::fifo:
      return "a FIFO";
    case std::filesystem::file_type::socket:
      return "a socket";
    default:
      return "not a regular file";
  }
}

/// The size in bytes of the regular file at `path` (after symbolic links). A directory, a device,
/// a FIFO or a socket is refused with a DataError naming it: reading one could block, or never
/// end (/dev/zero). `source` starts the messages ("MNIST"), `expected` ends them.
std::uintmax_t regular_file_size(const std::filesystem::path& path, const std::string& source,
                                 const std::string& expected) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  TORCHBUS_CHECK(std::filesystem::exists(status), DataError, source, ": cannot open '",
                 path.string(), "'", error ? ": " + error.message() : std::string(), " (expected ",
                 expected, ")");
  TORCHBUS_CHECK(std::filesystem::is_regular_file(status), DataError, source, ": '", path.string(),
                 "' is ", entry_kind(status), "; expected ", expected);
  const auto size = std::filesystem::file_size(path, error);
  TORCHBUS_CHECK(!error, DataError, source, ": cannot read the size of '", path.string(),
                 "': ", error.message());
  return size;
}

std::uint32_t read_big_endian(std::istream& in) {
  unsigned char bytes[4] = {0, 0, 0, 0};
  in.read(reinterpret_cast<char*>(bytes), 4);
  return (std::uint32_t(bytes[0]) << 24) | (std::uint32_t(bytes[1]) << 16) |
         (std::uint32_t(bytes[2]) << 8) | std::uint32_t(bytes[3]);
}

/// Reads an IDX file of unsigned bytes with `dimensions` dimensions (1: labels, 3: images),
/// checking its magic number and, before allocating anything, that the file holds all the bytes
/// its header announces.
at::Tensor read_idx(const std::filesystem::path& path, std::uint32_t dimensions, const char* kind) {
  const auto file_size = regular_file_size(
      path, "MNIST", concat("the ", kind, " file of the standard IDX set in that directory"));
  std::ifstream in(path, std::ios::binary);
  TORCHBUS_CHECK(in.good(), DataError, "MNIST: cannot open '", path.string(), "' (expected the ",
                 kind, " file of the standard IDX set in that directory)");
  const std::uint32_t expected_magic = 0x800 + dimensions;
  const auto magic = read_big_endian(in);
  TORCHBUS_CHECK(in.good(), DataError, "MNIST: ", path.string(),
                 " is too short to hold an IDX header");
  TORCHBUS_CHECK(magic == expected_magic, DataError, "MNIST: ", path.string(),
                 " has IDX magic number ", magic, "; expected ", expected_magic, " for ", kind,
                 " (is it an uncompressed ", kind, " file?)");
  std::vector<std::int64_t> sizes;
  for (std::uint32_t i = 0; i < dimensions; ++i) sizes.push_back(read_big_endian(in));
  TORCHBUS_CHECK(in.good(), DataError, "MNIST: ", path.string(), " has a truncated IDX header");
  // The product of the sizes (each below 2^32) saturates instead of overflowing.
  const std::uintmax_t header_bytes = 4 * (1 + std::uintmax_t{dimensions});
  const auto data_bytes = file_size - header_bytes;
  constexpr auto largest = std::numeric_limits<std::uintmax_t>::max();
  std::uintmax_t announced = 1;
  std::string shape;
  for (const auto size : sizes) {
    const auto factor = static_cast<std::uintmax_t>(size);
    announced = factor != 0 && announced > largest / factor ? largest : announced * factor;
    shape += (shape.empty() ? "" : " x ") + std::to_string(size);
  }
  // Exactly: more bytes than announced is a file of another shape (torchvision refuses it too).
  TORCHBUS_CHECK(announced == data_bytes, DataError, "MNIST: ", path.string(), " holds ",
                 data_bytes, " bytes of data; its header announces ", shape, " bytes");
  auto values = torch::empty(sizes, torch::kUInt8);
  in.read(reinterpret_cast<char*>(values.data_ptr<std::uint8_t>()), values.numel());
  TORCHBUS_CHECK(in.gcount() == values.numel(), DataError, "MNIST: ", path.string(), " holds ",
                 in.gcount(), " bytes of data; its header announces ", values.numel());
  TORCHBUS_CHECK(values.size(0) > 0, DataError, "MNIST: ", path.string(), " holds no ", kind,
                 "; expected at least one");
  return values;
}

constexpr std::int64_t kMnistClasses = 10;

/// Images as [N, 1, H, W] floats normalized as LibTorch's MNIST does, labels as int64.
std::pair<at::Tensor, at::Tensor> read_idx_split(const std::filesystem::path& images,
                                                 const std::filesystem::path& labels) {
  const auto pixels = read_idx(images, 3, "images");
  const auto classes = read_idx(labels, 1, "labels");
  TORCHBUS_CHECK(pixels.size(0) == classes.size(0), DataError, "MNIST: ", images.string(), " has ",
                 pixels.size(0), " images but ", labels.string(), " has ", classes.size(0),
                 " labels; expected one label per image");
  TORCHBUS_CHECK(pixels.size(1) > 0 && pixels.size(2) > 0, DataError, "MNIST: ", images.string(),
                 " has images of ", pixels.size(1), "x", pixels.size(2),
                 " pixels; expected at least 1x1");
  const auto largest = classes.max().item<std::int64_t>();
  TORCHBUS_CHECK(largest < kMnistClasses, DataError, "MNIST: a label in ", labels.string(), " is ",
                 largest, "; expected digits 0 to ", kMnistClasses - 1);
  const auto inputs = (pixels.to(torch::kFloat).div(255.0).unsqueeze(1) - 0.1307) / 0.3081;
  return {inputs, classes.to(torch::kLong)};
}

}  // namespace

Dataset mnist_dataset(const std::string& directory) {
  const std::filesystem::path root(directory);
  TORCHBUS_CHECK(std::filesystem::is_directory(root), DataError, "MNIST: '", directory,
                 "' is not a directory (expected one holding train-images-idx3-ubyte, "
                 "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte)");
  const auto train_images = root / "train-images-idx3-ubyte";
  Dataset dataset;
  std::tie(dataset.train_inputs, dataset.train_targets) =
      read_idx_split(train_images, root / "train-labels-idx1-ubyte");
  std::tie(dataset.validation_inputs, dataset.validation_targets) =
      read_idx_split(root / "t10k-images-idx3-ubyte", root / "t10k-labels-idx1-ubyte");
  TORCHBUS_CHECK(
      dataset.train_inputs.sizes().slice(1) == dataset.validation_inputs.sizes().slice(1),
      DataError, "MNIST: the images of ", (root / "t10k-images-idx3-ubyte").string(), " are ",
      dataset.validation_inputs.size(2), "x", dataset.validation_inputs.size(3),
      " pixels, those of ", train_images.string(), " ", dataset.train_inputs.size(2), "x",
      dataset.train_inputs.size(3), "; expected one image size");
  dataset.classes = kMnistClasses;
  dataset.images = true;
  dataset.images_file = train_images.string();
  dataset.description = concat("MNIST from ", directory, ": ", dataset.train_inputs.size(0),
                               " train / ", dataset.validation_inputs.size(0), " test images");
  return dataset;
}

namespace {

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream stream(line);
  std::string cell;
  while (std::getline(stream, cell, ',')) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.emplace_back();
  return cells;
}

std::string trim(std::string text) {
  const auto first = text.find_first_not_of(" \t\r");
  const auto last = text.find_last_not_of(" \t\r");
  return first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
}

/// The first `length` characters of `text` for a message, bytes that are not printable ASCII
/// shown as '?' and "..." when cut: a binary file given as CSV is not echoed.
std::string excerpt(const std::string& text, std::size_t length = 40) {
  std::string shown;
  for (std::size_t i = 0; i < text.size() && i < length; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    shown += byte >= 0x20 && byte < 0x7f ? text[i] : '?';
  }
  return text.size() > length ? shown + "..." : shown;
}

}  // namespace

/// Larger labels would give an output layer of more than a million classes.
constexpr double kMaxLabel = 1'000'000;

/// Features are float32: a larger magnitude would be infinite.
constexpr double kMaxFeature = std::numeric_limits<float>::max();

Dataset csv_dataset(const std::string& path, const std::string& label) {
  regular_file_size(path, "CSV", "a CSV file");
  std::ifstream in(path);
  TORCHBUS_CHECK(in.good(), DataError, "CSV: cannot open '", path, "'");
  std::string line;
  TORCHBUS_CHECK(static_cast<bool>(std::getline(in, line)), DataError, "CSV: '", path,
                 "' is empty; expected a header row");
  // A UTF-8 byte order mark (as spreadsheets write one) is not part of the first name.
  constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";
  if (line.compare(0, kByteOrderMark.size(), kByteOrderMark) == 0) {
    line.erase(0, kByteOrderMark.size());
  }
  auto header = split_csv_line(line);
  for (auto& name : header) name = trim(name);
  std::size_t label_column = header.size();
  for (std::size_t i = 0; i < header.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      TORCHBUS_CHECK(header[j] != header[i], DataError, "CSV: '", path, "' names column ", j + 1,
                     " and column ", i + 1, " '", excerpt(header[i]),
                     "'; expected a different name for every column");
    }
    if (header[i] == label) label_column = i;
  }
  TORCHBUS_CHECK(label_column < header.size(), DataError, "CSV: '", path, "' has no column '",
                 label,
                 "'; its columns are: ", excerpt(torchbus::detail::join_or_none(header), 200));
  TORCHBUS_CHECK(header.size() >= 2, DataError, "CSV: '", path,
                 "' needs at least one feature column besides the label");
  std::vector<float> features;
  std::vector<std::int64_t> labels;
  std::int64_t row = 1;  // 1-based line number of the header
  while (std::getline(in, line)) {
    ++row;
    if (trim(line).empty()) continue;
    const auto cells = split_csv_line(line);
    TORCHBUS_CHECK(cells.size() == header.size(), DataError, "CSV: ", path, " row ", row, " has ",
                   cells.size(), " cells; expected ", header.size(), " as in the header");
    for (std::size_t column = 0; column < cells.size(); ++column) {
      const auto text = trim(cells[column]);
      std::size_t used = 0;
      double value = 0.0;
      try {
        value = std::stod(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      TORCHBUS_CHECK(!text.empty() && used == text.size(), DataError, "CSV: ", path, " row ", row,
                     " column '", excerpt(header[column]), "': '", excerpt(text),
                     "' is not a number");
      if (column == label_column) {
        TORCHBUS_CHECK(value >= 0 && value < kMaxLabel &&
                           value == static_cast<double>(static_cast<std::int64_t>(value)),
                       DataError, "CSV: ", path, " row ", row, " column '", excerpt(header[column]),
                       "': label '", excerpt(text), "' is not a class index (an integer from 0 to ",
                       kMaxLabel - 1, ")");
        labels.push_back(static_cast<std::int64_t>(value));
      } else {
        TORCHBUS_CHECK(std::isfinite(value) && std::abs(value) <= kMaxFeature, DataError,
                       "CSV: ", path, " row ", row, " column '", excerpt(header[column]), "': '",
                       excerpt(text), "' is not a finite float32 number (magnitude at most ",
                       kMaxFeature, ")");
        features.push_back(static_cast<float>(value));
      }
    }
  }
  const auto rows = static_cast<std::int64_t>(labels.size());
  TORCHBUS_CHECK(rows >= 2, DataError, "CSV: '", path, "' has ", rows,
                 " data rows; expected at least 2 (one for training, one for validation)");
  const auto columns = static_cast<std::int64_t>(header.size()) - 1;
  const auto inputs = torch::from_blob(features.data(), {rows, columns}, torch::kFloat).clone();
  const auto targets = torch::from_blob(labels.data(), {rows}, torch::kLong).clone();
  const auto validation = std::max<std::int64_t>(1, rows / 5);
  Dataset dataset;
  dataset.train_inputs = inputs.slice(0, 0, rows - validation);
  dataset.train_targets = targets.slice(0, 0, rows - validation);
  dataset.validation_inputs = inputs.slice(0, rows - validation);
  dataset.validation_targets = targets.slice(0, rows - validation);
  dataset.classes = targets.max().item<std::int64_t>() + 1;
  dataset.description = concat("CSV ", path, ": ", rows, " rows, ", columns, " features, label '",
                               label, "', ", dataset.classes, " classes");
  return dataset;
}

Dataset load_dataset(const std::string& spec, std::uint64_t seed) {
  if (spec == "synthetic") return synthetic_dataset(8192, 2048, 32, 10, seed);
  const auto colon = spec.find(':');
  const auto kind = spec.substr(0, colon);
  const auto rest = colon == std::string::npos ? std::string() : spec.substr(colon + 1);
  if (kind == "mnist") {
    TORCHBUS_CHECK(!rest.empty(), ConfigError, "--data mnist needs a directory: mnist:DIR");
    return mnist_dataset(rest);
  }
  if (kind == "csv") {
    TORCHBUS_CHECK(!rest.empty(), ConfigError, "--data csv needs a file: csv:FILE[:LABEL]");
    const auto label_colon = rest.rfind(':');
    if (label_colon == std::string::npos) return csv_dataset(rest, "label");
    return csv_dataset(rest.substr(0, label_colon), rest.substr(label_colon + 1));
  }
  throw ConfigError(concat("--data '", spec,
                           "' is not a data source; expected synthetic, mnist:DIR or "
                           "csv:FILE[:LABEL]"));
}

}  // namespace train
