// checkpoint_check: verifies checkpoint files for tests/combination/run_matrix.py.
//
// For each file argument, in order: reads it with torchbus::read_checkpoint_payload (framing,
// CRC, version), parses the payload as a torch::serialize::InputArchive, and prints one line:
//   ok<TAB>STEP<TAB>IDENTITY-AS-HEX      or      error<TAB>MESSAGE (newlines as spaces)
// Exits 1 if any file failed, 2 without arguments.

#include <torch/serialize/input-archive.h>
#include <torchbus/checkpoint_file.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <sstream>
#include <string>

namespace {

std::string hex(const std::string& bytes) {
  std::string out;
  char digits[3];
  for (const char c : bytes) {
    std::snprintf(digits, sizeof digits, "%02x", static_cast<unsigned char>(c));
    out += digits;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: checkpoint_check FILE.tbckpt...\n";
    return 2;
  }
  bool all_ok = true;
  for (int i = 1; i < argc; ++i) {
    try {
      torchbus::CheckpointHeader header;
      const std::string payload = torchbus::read_checkpoint_payload(argv[i], &header);
      std::istringstream in(payload);
      torch::serialize::InputArchive archive;
      archive.load_from(in);
      std::cout << "ok\t" << header.step << "\t" << hex(header.identity) << "\n";
    } catch (const std::exception& error) {
      all_ok = false;
      std::string message = error.what();
      std::replace(message.begin(), message.end(), '\n', ' ');
      std::cout << "error\t" << message << "\n";
    }
  }
  std::cout.flush();
  return all_ok ? 0 : 1;
}
