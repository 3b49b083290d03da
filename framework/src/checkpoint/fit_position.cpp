#include <torch/torch.h>
#include <torchbus/checkpoint.hpp>

#include "checkpoint/fit_position.hpp"
#include "checkpoint/reader.hpp"

namespace torchbus {

void write_fit_position(torch::serialize::OutputArchive& archive, const FitProgress& saved,
                        std::int64_t accumulate_grad_batches, std::int64_t k_epoch) {
  archive.write("position",
                c10::IValue(std::vector<std::int64_t>{saved.epoch, saved.step, saved.batch_in_epoch,
                                                      saved.global_batch}));
  // The run's end: a resume from this checkpoint trains nothing (absent: it goes on).
  if (!saved.stop_reason.empty()) archive.write("stop_reason", c10::IValue(saved.stop_reason));
  // An early stop waiting for min_epochs or min_steps, which a resume keeps waiting.
  if (saved.held_stop_reason) {
    archive.write("held_stop_reason", c10::IValue(*saved.held_stop_reason));
  }
  archive.write("epoch_start_rng", saved.epoch_start_rng);
  archive.write("epoch_order_drawn", c10::IValue(saved.order_drawn));
  archive.write("accumulate_grad_batches", c10::IValue(accumulate_grad_batches));
  archive.write("accumulate_grad_batches_epoch", c10::IValue(k_epoch));
  // What a resume on another number of ranks checks (docs/distributed.md).
  archive.write("world_size", c10::IValue(saved.world_size));
  archive.write("batch_samples", c10::IValue(saved.batch_samples));
  // So that a resume at the end of a validated step's epoch does not validate it again (unless it
  // continues an epoch cut short, whose end runs again).
  archive.write("validated_step", c10::IValue(saved.validated_step));
  if (const auto& points = saved.epoch_end_points) {
    std::vector<std::string> names;
    std::vector<std::int64_t> ranges;
    for (const auto& range : *points) {
      names.push_back(range.name);
      ranges.push_back(range.begin);
      ranges.push_back(range.end);
    }
    archive.write("epoch_end_point_names", c10::IValue(detail::join_lines(names)));
    // A tensor: it reads back alike when it is empty (the end recorded nothing).
    archive.write("epoch_end_point_ranges", torch::tensor(ranges, torch::kLong).reshape({-1, 2}));
  }
}

FitProgress read_fit_position(detail::CheckpointReader& reader) {
  const auto position = reader.value("position").toIntVector();
  if (position.size() != 4) reader.fail("has a malformed 'position' entry");
  FitProgress progress;
  progress.epoch = position[0];
  progress.step = position[1];
  progress.batch_in_epoch = position[2];
  progress.global_batch = position[3];
  const auto stop_reason = reader.optional_value("stop_reason");
  if (!stop_reason.isNone() && !stop_reason.isString()) {
    reader.fail("has a malformed 'stop_reason' entry");
  }
  if (stop_reason.isString()) progress.stop_reason = stop_reason.toStringRef();
  const auto held_stop_reason = reader.optional_value("held_stop_reason");
  if (!held_stop_reason.isNone() && !held_stop_reason.isString()) {
    reader.fail("has a malformed 'held_stop_reason' entry");
  }
  if (held_stop_reason.isString()) progress.held_stop_reason = held_stop_reason.toStringRef();
  // Checkpoints before it was written replay the order of an epoch they are inside of.
  const auto order_drawn = reader.optional_value("epoch_order_drawn");
  if (!order_drawn.isNone() && !order_drawn.isBool()) {
    reader.fail("has a malformed 'epoch_order_drawn' entry");
  }
  progress.order_drawn = order_drawn.isBool() ? order_drawn.toBool() : progress.batch_in_epoch > 0;
  // Entries later versions added: absent in older checkpoints, an integer when present.
  const auto optional_integer = [&reader](const char* key, std::int64_t& into) {
    const auto value = reader.optional_value(key);
    if (!value.isNone() && !value.isInt()) reader.fail("has a malformed '", key, "' entry");
    if (value.isInt()) into = value.toInt();
  };
  optional_integer("world_size", progress.world_size);
  progress.accumulate_grad_batches = reader.value("accumulate_grad_batches").toInt();
  optional_integer("batch_samples", progress.batch_samples);
  optional_integer("validated_step", progress.validated_step);
  const auto names = reader.optional_value("epoch_end_point_names");
  const auto ranges = reader.optional_tensor("epoch_end_point_ranges");
  if (names.isNone() != !ranges.defined() || (!names.isNone() && !names.isString())) {
    reader.fail("has a malformed 'epoch_end_point' entry");
  }
  if (names.isString()) {
    const auto name_list = detail::split_lines(names.toStringRef());
    const auto count = static_cast<std::int64_t>(name_list.size());
    if (ranges.dim() != 2 || ranges.size(0) != count || ranges.size(1) != 2 ||
        ranges.scalar_type() != torch::kLong) {
      reader.fail("has a malformed 'epoch_end_point_ranges' entry: ", count,
                  " names, ranges of shape ", ranges.sizes(), " ", ranges.scalar_type(),
                  " (expected ", count, " x 2 int64)");
    }
    const auto values = ranges.cpu().contiguous();
    const auto* range = values.data_ptr<std::int64_t>();
    std::vector<SeriesRange> points;
    for (std::int64_t i = 0; i < count; ++i) {
      if (range[2 * i] < 0 || range[2 * i + 1] < range[2 * i]) {
        reader.fail("has a malformed 'epoch_end_point_ranges' entry: points [", range[2 * i], ", ",
                    range[2 * i + 1], ") of '", name_list[i], "'");
      }
      points.push_back(SeriesRange{name_list[i], range[2 * i], range[2 * i + 1]});
    }
    progress.epoch_end_points = std::move(points);
  }
  // Counts beyond what a run reaches would overflow as the run counts on (a forged file).
  const auto count_in_range = [](std::int64_t value, std::int64_t lowest) {
    return value >= lowest && value <= kMaxCheckpointCount;
  };
  if (!count_in_range(progress.epoch, 0) || !count_in_range(progress.step, 0) ||
      !count_in_range(progress.batch_in_epoch, 0) || !count_in_range(progress.global_batch, 0)) {
    reader.fail("has a malformed 'position' entry: epoch ", progress.epoch, ", step ",
                progress.step, ", batch ", progress.batch_in_epoch, ", global batch ",
                progress.global_batch, " (expected counts from 0 to 2^62)");
  }
  if (!count_in_range(progress.world_size, 0) || !count_in_range(progress.batch_samples, 0) ||
      !count_in_range(progress.validated_step, -1) ||
      // 0: not recorded (older checkpoints); a resume on other ranks divides by it.
      !count_in_range(progress.accumulate_grad_batches, progress.world_size > 0 ? 1 : 0)) {
    reader.fail("has a malformed position: world_size ", progress.world_size,
                ", accumulate_grad_batches ", progress.accumulate_grad_batches, ", batch_samples ",
                progress.batch_samples, ", validated_step ", progress.validated_step,
                " (expected counts up to 2^62, accumulate_grad_batches from 1 when world_size is "
                "recorded)");
  }
  return progress;
}

}  // namespace torchbus
