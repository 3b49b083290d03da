#include "dataset.hpp"

#include "csv_records.hpp"

#include <torchbus/error.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unordered_map>
#include <utility>
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

/// ": " and the reason of the last failed call (errno), or nothing when it recorded none.
std::string reason_of_errno() {
  return errno != 0 ? concat(": ", std::strerror(errno)) : std::string();
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
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  TORCHBUS_CHECK(in.good(), DataError, "MNIST: cannot open '", path.string(), "'",
                 reason_of_errno(), " (expected the ", kind,
                 " file of the standard IDX set in that directory)");
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
  constexpr auto kExpected =
      "a directory holding train-images-idx3-ubyte, train-labels-idx1-ubyte, "
      "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte";
  std::error_code error;  // a loop of links, a name too long, a folder that may not be searched
  const auto is_directory = std::filesystem::is_directory(root, error);
  TORCHBUS_CHECK(!error, DataError, "MNIST: cannot open '", directory, "': ", error.message(),
                 " (expected ", kExpected, ")");
  TORCHBUS_CHECK(is_directory, DataError, "MNIST: '", directory, "' is not a directory (expected ",
                 kExpected, ")");
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

/// Features are float32: a magnitude from here on rounds to infinity (halfway between float32's
/// largest, 3.4028235e38, and 2^128), one below it to a finite float.
constexpr double kFeatureLimit = 0x1.ffffffp+127;

/// Reads the trimmed cell `text` as a decimal number, as strtod does but without its hexadecimal
/// form ("0x10"): false when it is not one. A magnitude beyond double's reads as an infinity, one
/// below double's smallest as the nearest double (0 or a subnormal), as Python's float() does.
bool read_number(const std::string& text, double& value) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return false;
  const auto digits = text.find_first_not_of("+-");
  if (digits != std::string::npos && text.size() > digits + 1 && text[digits] == '0' &&
      (text[digits + 1] == 'x' || text[digits + 1] == 'X')) {
    return false;
  }
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

/// What `labels` (class indices) leave for the log to warn about: classes without a sample below
/// the largest label (the model gets an output for each), or a single class.
std::vector<std::string> label_warnings(const std::string& path,
                                        const std::vector<std::int64_t>& labels,
                                        std::int64_t classes) {
  std::vector<bool> seen(static_cast<std::size_t>(classes), false);
  for (const auto label : labels) seen[static_cast<std::size_t>(label)] = true;
  const auto present = std::count(seen.begin(), seen.end(), true);
  if (present == 1) {
    return {concat("CSV ", path, ": every label is ", classes - 1,
                   ": the model learns a single class")};
  }
  if (present < classes) {
    return {concat("CSV ", path, ": the labels run up to ", classes - 1, ", so the model has ",
                   classes, " outputs, but only ", present,
                   " of these classes occur (labels are class indices from 0)")};
  }
  return {};
}

namespace {

/// A CSV file's rows: the features of each row and, when the file has the label column, its labels.
struct CsvTable {
  std::vector<float> features;
  std::vector<std::int64_t> labels;  // class indices (empty without the label column)
  std::vector<float> values;         // the label column's values to regress
  std::int64_t rows = 0;
  std::int64_t columns = 0;                // feature columns
  bool labelled = false;                   // the file has the label column
  std::vector<std::string> feature_names;  // the header's other columns, in order
};

/// The trimmed column names of `cells`, a CSV file's header: each named, each once, `label` among
/// them when `label_required`, and a feature column besides it.
std::vector<std::string> read_csv_header(const std::string& path, std::vector<std::string> cells,
                                         const std::string& label, bool label_required,
                                         char delimiter) {
  std::unordered_map<std::string, std::size_t> column_of_name;
  for (std::size_t i = 0; i < cells.size(); ++i) {
    cells[i] = trim(cells[i]);
    TORCHBUS_CHECK(!cells[i].empty(), DataError, "CSV: '", path, "' column ", i + 1,
                   " has no name; expected a name for every column (pandas' to_csv writes its "
                   "index as such a column unless given index=False)");
    const auto [first, added] = column_of_name.emplace(cells[i], i);
    TORCHBUS_CHECK(added, DataError, "CSV: '", path, "' names column ", first->second + 1,
                   " and column ", i + 1, " '", excerpt(cells[i]),
                   "'; expected a different name for every column");
  }
  const bool labelled = column_of_name.count(label) != 0;
  TORCHBUS_CHECK(labelled || !label_required, DataError, "CSV: '", path, "' has no column '", label,
                 "'; its columns are: ", excerpt(torchbus::detail::join_or_none(cells), 200),
                 csv_delimiter_hint(cells, delimiter));
  TORCHBUS_CHECK(cells.size() >= (labelled ? 2u : 1u), DataError, "CSV: '", path,
                 "' needs at least one feature column besides the label",
                 csv_delimiter_hint(cells, delimiter));
  return cells;
}

/// Adds the numeric cells of `record`, a data row, to `table`: features, and the label column's
/// class index (or value to regress, with `regression`).
void add_csv_row(const std::string& path, const std::vector<std::string>& header,
                 std::size_t label_column, bool regression, const CsvRecord& record,
                 CsvTable& table) {
  const auto& cells = record.cells;
  const auto row = record.line;
  TORCHBUS_CHECK(cells.size() == header.size(), DataError, "CSV: ", path, " row ", row, " has ",
                 cells.size(), " cells; expected ", header.size(), " as in the header");
  for (std::size_t column = 0; column < cells.size(); ++column) {
    const auto text = trim(cells[column]);
    double value = 0.0;
    TORCHBUS_CHECK(read_number(text, value), DataError, "CSV: ", path, " row ", row, " column '",
                   excerpt(header[column]), "': '", excerpt(text), "' is not a number");
    if (column == label_column && regression) {
      TORCHBUS_CHECK(std::abs(value) < kFeatureLimit, DataError, "CSV: ", path, " row ", row,
                     " column '", excerpt(header[column]), "': target '", excerpt(text),
                     "' is not a finite float32 number (magnitude at most 3.4028235e38)");
      table.values.push_back(static_cast<float>(value));
    } else if (column == label_column) {
      TORCHBUS_CHECK(value >= 0 && value < kMaxLabel &&
                         value == static_cast<double>(static_cast<std::int64_t>(value)),
                     DataError, "CSV: ", path, " row ", row, " column '", excerpt(header[column]),
                     "': label '", excerpt(text), "' is not a class index (an integer from 0 to ",
                     kMaxLabel - 1, ")");
      table.labels.push_back(static_cast<std::int64_t>(value));
    } else {
      TORCHBUS_CHECK(std::abs(value) < kFeatureLimit, DataError, "CSV: ", path, " row ", row,
                     " column '", excerpt(header[column]), "': '", excerpt(text),
                     "' is not a finite float32 number (magnitude at most 3.4028235e38)");
      table.features.push_back(static_cast<float>(value));
    }
  }
  ++table.rows;
}

/// Reads `path`: a header row, then numeric cells, split at `delimiter`; the column `label` holds
/// class indices. Without that column the file is a DataError when `label_required`, else every
/// column is a feature.
CsvTable read_csv_table(const std::string& path, const std::string& label, bool label_required,
                        bool regression, char delimiter) {
  regular_file_size(path, "CSV", "a CSV file");
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  TORCHBUS_CHECK(in.good(), DataError, "CSV: cannot open '", path, "'", reason_of_errno());
  CsvTable table;
  std::vector<std::string> header;
  std::size_t label_column = 0;
  for_each_csv_record(in, path, delimiter, [&](const CsvRecord& record) {
    // A line of spaces is blank too (Python's csv.reader gives it as one cell).
    if (record.cells.size() == 1 && trim(record.cells[0]).empty()) return;
    if (header.empty()) {
      header = read_csv_header(path, record.cells, label, label_required, delimiter);
      const auto found = std::find(header.begin(), header.end(), label);
      table.labelled = found != header.end();
      label_column =
          table.labelled ? static_cast<std::size_t>(found - header.begin()) : header.size();
      return;
    }
    add_csv_row(path, header, label_column, regression, record, table);
  });
  TORCHBUS_CHECK(!header.empty(), DataError, "CSV: '", path, "' is empty; expected a header row");
  table.columns = static_cast<std::int64_t>(header.size()) - (table.labelled ? 1 : 0);
  for (std::size_t column = 0; column < header.size(); ++column) {
    if (column != label_column) table.feature_names.push_back(header[column]);
  }
  return table;
}

/// The file and the label column of a "csv:FILE[:LABEL]" spec (`rest`: what follows "csv:"); the
/// label defaults to "label". A ConfigError for no file, or an empty LABEL, naming `flag` ("--data
/// "; "" where the caller names the flag).
std::pair<std::string, std::string> csv_file_and_label(const std::string& flag,
                                                       const std::string& spec,
                                                       const std::string& rest) {
  TORCHBUS_CHECK(!rest.empty(), ConfigError, flag, "csv needs a file: csv:FILE[:LABEL]");
  const auto label_colon = rest.rfind(':');
  if (label_colon == std::string::npos) return {rest, "label"};
  TORCHBUS_CHECK(label_colon + 1 < rest.size(), ConfigError, flag, "'", spec,
                 "' names no label column after its last ':'; expected csv:FILE:LABEL, or "
                 "csv:FILE for the column 'label'");
  return {rest.substr(0, label_colon), rest.substr(label_colon + 1)};
}

/// `dataset` (classes of the built-in set or MNIST) as a regression of the class index.
Dataset as_regression(Dataset dataset) {
  dataset.train_targets = dataset.train_targets.to(torch::kFloat).unsqueeze(1);
  dataset.validation_targets = dataset.validation_targets.to(torch::kFloat).unsqueeze(1);
  dataset.classes = 1;
  dataset.regression = true;
  dataset.description += ", regressing the class index";
  return dataset;
}

}  // namespace

Dataset csv_dataset(const std::string& path, const std::string& label, bool regression,
                    char delimiter) {
  auto table = read_csv_table(path, label, /*label_required=*/true, regression, delimiter);
  auto& features = table.features;
  auto& labels = table.labels;
  const auto rows = table.rows;
  TORCHBUS_CHECK(rows >= 2, DataError, "CSV: '", path, "' has ", rows,
                 " data rows; expected at least 2 (one for training, one for validation)");
  const auto columns = table.columns;
  const auto inputs = torch::from_blob(features.data(), {rows, columns}, torch::kFloat).clone();
  const auto targets = regression
                           ? torch::from_blob(table.values.data(), {rows, 1}, torch::kFloat).clone()
                           : torch::from_blob(labels.data(), {rows}, torch::kLong).clone();
  const auto validation = std::max<std::int64_t>(1, rows / 5);
  Dataset dataset;
  dataset.train_inputs = inputs.slice(0, 0, rows - validation);
  dataset.train_targets = targets.slice(0, 0, rows - validation);
  dataset.validation_inputs = inputs.slice(0, rows - validation);
  dataset.validation_targets = targets.slice(0, rows - validation);
  dataset.feature_names = std::move(table.feature_names);
  if (regression) {
    dataset.classes = 1;
    dataset.regression = true;
    dataset.description = concat("CSV ", path, ": ", rows, " rows, ", columns,
                                 " features, target '", label, "' (regression)");
    return dataset;
  }
  dataset.classes = *std::max_element(labels.begin(), labels.end()) + 1;
  dataset.description = concat("CSV ", path, ": ", rows, " rows, ", columns, " features, label '",
                               label, "', ", dataset.classes, " classes");
  dataset.warnings = label_warnings(path, labels, dataset.classes);
  return dataset;
}

Dataset load_dataset(const std::string& spec, std::uint64_t seed, bool regression,
                     char csv_delimiter) {
  if (spec == "synthetic") {
    auto dataset = synthetic_dataset(8192, 2048, 32, 10, seed);
    return regression ? as_regression(std::move(dataset)) : dataset;
  }
  const auto colon = spec.find(':');
  const auto kind = spec.substr(0, colon);
  const auto rest = colon == std::string::npos ? std::string() : spec.substr(colon + 1);
  if (kind == "mnist") {
    TORCHBUS_CHECK(!rest.empty(), ConfigError, "--data mnist needs a directory: mnist:DIR");
    return regression ? as_regression(mnist_dataset(rest)) : mnist_dataset(rest);
  }
  if (kind == "csv") {
    const auto [path, label] = csv_file_and_label("--data ", spec, rest);
    return csv_dataset(path, label, regression, csv_delimiter);
  }
  throw ConfigError(concat("--data '", spec,
                           "' is not a data source; expected synthetic, mnist:DIR or "
                           "csv:FILE[:LABEL]"));
}

HeldOut load_held_out(const std::string& spec, std::uint64_t seed, bool labels_required,
                      bool regression, char csv_delimiter) {
  const auto colon = spec.find(':');
  const auto kind = spec.substr(0, colon);
  HeldOut held_out;
  if (kind == "csv" && colon != std::string::npos) {
    // Every row of the file, with its labels when it has the label column.
    const auto [path, label] = csv_file_and_label("", spec, spec.substr(colon + 1));
    auto table = read_csv_table(path, label, labels_required, regression, csv_delimiter);
    TORCHBUS_CHECK(table.rows >= 1, DataError, "CSV: '", path, "' has no data rows");
    held_out.inputs =
        torch::from_blob(table.features.data(), {table.rows, table.columns}, torch::kFloat).clone();
    if (table.labelled) {
      held_out.targets =
          regression ? torch::from_blob(table.values.data(), {table.rows, 1}, torch::kFloat).clone()
                     : torch::from_blob(table.labels.data(), {table.rows}, torch::kLong).clone();
    }
    held_out.feature_names = table.feature_names;
    held_out.description =
        concat("CSV ", path, ": ", table.rows, " rows, ", table.columns, " features",
               table.labelled ? concat(", label '", label, "'") : std::string(", no labels"));
    return held_out;
  }
  // The built-in set and MNIST: their validation split (MNIST: the t10k files).
  const auto data = load_dataset(spec, seed, regression, csv_delimiter);
  held_out.inputs = data.validation_inputs;
  held_out.targets = data.validation_targets;
  held_out.description =
      concat(data.description, ": its ", data.validation_inputs.size(0), " held-out samples");
  return held_out;
}

HeldOut load_held_out_for(const std::string& flag, const std::string& spec, std::uint64_t seed,
                          bool labels_required, const Dataset& trained_on, char csv_delimiter) {
  HeldOut held_out;
  try {
    held_out = load_held_out(spec, seed, labels_required, trained_on.regression, csv_delimiter);
  } catch (const ConfigError& error) {
    throw ConfigError(concat(flag, " ", spec, ": ", error.what()));
  }
  const auto shape = held_out.inputs.sizes().slice(1);
  const auto expected = trained_on.train_inputs.sizes().slice(1);
  TORCHBUS_CHECK(shape == expected, DataError, flag, " ", spec, ": its samples have shape ", shape,
                 " (", held_out.description, "); the model, made for --data's, takes ", expected,
                 " (", trained_on.description,
                 "); give --data the data the weights were "
                 "trained on");
  // A CSV file's features by name: the same columns in another order would be read as others.
  TORCHBUS_CHECK(held_out.feature_names.empty() || trained_on.feature_names.empty() ||
                     held_out.feature_names == trained_on.feature_names,
                 DataError, flag, " ", spec, ": its feature columns are ",
                 torchbus::detail::join_or_none(held_out.feature_names),
                 "; the model was trained on ",
                 torchbus::detail::join_or_none(trained_on.feature_names),
                 " (in this order); expected the same columns in the same order",
                 csv_delimiter_hint(held_out.feature_names, csv_delimiter));
  if (!trained_on.regression && held_out.targets.defined() && held_out.targets.numel() > 0) {
    const auto largest = held_out.targets.max().item<std::int64_t>();
    TORCHBUS_CHECK(largest < trained_on.classes, DataError, flag, " ", spec, ": label ", largest,
                   " is not one of the model's ", trained_on.classes, " classes (0 to ",
                   trained_on.classes - 1, ")");
  }
  return held_out;
}

}  // namespace train
