// The records torchbus-train's CSV reader (apps/torchbus-train/csv_records.cpp) reads from files,
// for compare_csv.py to compare with Python's csv.reader. Reads MANIFEST, a JSON list of
// {"path": FILE, "delimiter": CHARACTER}, and writes OUT, a JSON list in the same order of
// {"records": [{"line": N, "cells": [...]}, ...]} or {"error": MESSAGE}.
// Usage: csv_reference MANIFEST OUT

#include <torchbus-train/csv_records.hpp>

#include <nlohmann/json.hpp>

#include <exception>
#include <fstream>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: csv_reference MANIFEST OUT\n";
    return 2;
  }
  const auto manifest = nlohmann::json::parse(std::ifstream(argv[1]));
  auto results = nlohmann::json::array();
  for (const auto& entry : manifest) {
    const auto path = entry.at("path").get<std::string>();
    const auto delimiter = entry.at("delimiter").get<std::string>();
    nlohmann::json result;
    try {
      std::ifstream in(path, std::ios::binary);
      auto records = nlohmann::json::array();
      train::for_each_csv_record(in, path, delimiter.at(0), [&](const train::CsvRecord& record) {
        records.push_back({{"line", record.line}, {"cells", record.cells}});
      });
      result["records"] = std::move(records);
    } catch (const std::exception& error) {
      result["error"] = error.what();
    }
    results.push_back(std::move(result));
  }
  std::ofstream(argv[2]) << results.dump();
  return 0;
}
