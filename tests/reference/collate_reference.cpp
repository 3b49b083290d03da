// Samples and the batches torchbus::collate makes of them, for compare_collate.py to remake with
// PyTorch (torch.utils.data.default_collate, torch.nn.utils.rnn.pad_sequence) and compare bit for
// bit. Writes DIR/samples.pt (each sample's fields as "<sample>.<field>") and DIR/batch.pt (the
// batch's fields), both state_dict files. Usage: collate_reference DIR

#include <torch/torch.h>
#include <torchbus/atomic_file.hpp>
#include <torchbus/batch.hpp>
#include <torchbus/collate.hpp>
#include <torchbus/state_dict.hpp>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: collate_reference DIR\n";
    return 2;
  }
  const std::filesystem::path dir(argv[1]);
  torch::manual_seed(4);
  std::vector<torchbus::Batch> samples;
  torchbus::NamedTensors written_samples;
  for (int i = 0; i < 5; ++i) {
    const auto length = 2 + (i * 3) % 5;  // 2, 5, 3, 6, 4
    torchbus::Batch sample;
    sample
        .set("data", torch::randn({3, 4}))                               // stacked
        .set("target", torch::tensor(static_cast<std::int64_t>(i % 3)))  // 0-dim: [N]
        .set("mask", torch::rand({4}) > 0.5)                             // bool
        .set("weight", torch::rand({}, torch::kDouble))                  // 0-dim double
        .set("ids", torch::randint(1, 50, {length}, torch::kLong))       // padded with 0
        .set("frames", torch::randn({length, 3}));                       // padded with -1
    for (const auto& name : {"data", "target", "mask", "weight", "ids", "frames"}) {
      written_samples.emplace_back(std::to_string(i) + "." + name, sample.get(name));
    }
    samples.push_back(std::move(sample));
  }
  const auto batch =
      torchbus::collate(samples, torchbus::CollateOptions().pad("ids", 0).pad("frames", -1));
  torchbus::NamedTensors written_batch;
  for (const auto& name : {"data", "target", "mask", "weight", "ids", "frames"}) {
    written_batch.emplace_back(name, batch.get(name));
  }
  std::filesystem::create_directories(dir);
  torchbus::write_file_atomically(dir / "samples.pt", torchbus::state_dict_bytes(written_samples));
  torchbus::write_file_atomically(dir / "batch.pt", torchbus::state_dict_bytes(written_batch));
  std::cout << "collate_reference: 5 samples of 6 fields and their batch in " << dir.string()
            << '\n';
  return 0;
}
