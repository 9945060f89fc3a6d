// train::Augmenter alone, for tests/cli/augment_test.py: the pixels of raw uint8 N×H×W×3
// tiles augmented as `mltool train --augment LIST` would at one step, with the parameters
// drawn, so the test can compute each transform again in numpy from those parameters.
//
//   augment_probe IN.raw N H W OUT.raw PARAMS.json LIST SEED STEP ID,ID,... [DEVICE]
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "mltool/train/augment.hpp"

namespace {

std::vector<std::int64_t> split_ids(const std::string& text) {
  std::vector<std::int64_t> ids;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) ids.push_back(std::stoll(item));
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 11) {
    std::cerr << "usage: augment_probe IN.raw N H W OUT.raw PARAMS.json LIST SEED STEP IDS "
                 "[DEVICE]\n";
    return 1;
  }
  try {
    std::ifstream in(argv[1], std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::int64_t n = std::stoll(argv[2]), h = std::stoll(argv[3]), w = std::stoll(argv[4]);
    const torch::Device device(argc > 11 ? argv[11] : "cpu");
    const auto x = torch::from_blob(bytes.data(), {n, h, w, 3}, torch::kUInt8).to(device);
    const mltool::train::Augmenter augment(mltool::train::parse_augment({argv[7]}),
                                           std::stoull(argv[8]));
    nlohmann::json params;
    const auto out = augment.apply(x, split_ids(argv[10]), std::stoll(argv[9]), &params)
                         .to(torch::kCPU)
                         .contiguous();
    std::ofstream(argv[5], std::ios::binary)
        .write(static_cast<const char*>(out.data_ptr()), static_cast<std::streamsize>(out.numel()));
    std::ofstream(argv[6]) << params.dump();
  } catch (const std::exception& e) {
    std::cerr << "augment_probe: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
