#include "run_segments.hpp"

#include <torch/torch.h>
#include <torchbus/callbacks/archive_value.hpp>
#include <torchbus/error.hpp>

namespace train {

namespace {
constexpr std::size_t kFields = 4;  // first_step, world_size, batch_size, accumulate
}  // namespace

RunSegments::RunSegments(RunSegment now) : Callback("run_segments"), now_(now) {}

void RunSegments::on_action_start(torchbus::State& state) {
  segments_ = earlier_;
  auto now = now_;
  now.first_step = state.step;
  segments_.push_back(now);
}

void RunSegments::save_state(torch::serialize::OutputArchive& archive) const {
  std::vector<std::int64_t> flat;
  for (const auto& segment : segments_) {
    flat.insert(flat.end(),
                {segment.first_step, segment.world_size, segment.batch_size, segment.accumulate});
  }
  archive.write("segments", c10::IValue(flat));
}

void RunSegments::load_state(torch::serialize::InputArchive& archive) {
  const auto flat = torchbus::read_value(archive, "segments").toIntVector();
  TORCHBUS_CHECK(flat.size() % kFields == 0, torchbus::CheckpointError, "run_segments: expected ",
                 kFields, " numbers per segment, got ", flat.size());
  earlier_.clear();
  for (std::size_t i = 0; i < flat.size(); i += kFields) {
    earlier_.push_back({flat[i], flat[i + 1], flat[i + 2], flat[i + 3]});
  }
}

JsonObject RunSegments::to_json() const {
  auto list = JsonObject::array();
  for (const auto& segment : segments_) {
    list.push_back({{"first_step", segment.first_step},
                    {"world_size", segment.world_size},
                    {"batch_size", segment.batch_size},
                    {"accumulate", segment.accumulate}});
  }
  return list;
}

}  // namespace train
