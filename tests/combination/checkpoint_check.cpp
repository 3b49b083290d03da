// checkpoint_check: verifies checkpoint files for tests/combination/run_matrix.py.
//
// For each file argument: reads it with torchbus::read_checkpoint_payload (framing, CRC, version),
// parses the payload as a torch::serialize::InputArchive, and prints one JSON line:
//   {"path": "...", "ok": true, "step": N, "identity": "..."}
//   {"path": "...", "ok": false, "error": "..."}
// Exits 1 if any file failed, 2 without arguments.

#include <torch/serialize/input-archive.h>
#include <torchbus/checkpoint_file.hpp>

#include <cstdio>
#include <exception>
#include <iostream>
#include <sstream>
#include <string>

namespace {

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: checkpoint_check FILE.tbckpt...\n";
    return 2;
  }
  bool all_ok = true;
  for (int i = 1; i < argc; ++i) {
    const std::string path = argv[i];
    try {
      torchbus::CheckpointHeader header;
      const std::string payload = torchbus::read_checkpoint_payload(path, &header);
      std::istringstream in(payload);
      torch::serialize::InputArchive archive;
      archive.load_from(in);
      std::cout << "{\"path\": " << json_string(path) << ", \"ok\": true, \"step\": " << header.step
                << ", \"identity\": " << json_string(header.identity) << "}\n";
    } catch (const std::exception& error) {
      all_ok = false;
      std::cout << "{\"path\": " << json_string(path) << ", \"ok\": false, \"error\": "
                << json_string(error.what()) << "}\n";
    }
  }
  std::cout.flush();
  return all_ok ? 0 : 1;
}
