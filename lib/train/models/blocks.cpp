#include "blocks.hpp"

namespace mltool::train::models {

torch::Tensor activate(const std::string& name, const torch::Tensor& x) {
  if (name == "relu") return torch::relu(x);
  if (name == "gelu") return torch::gelu(x);
  if (name == "silu") return torch::silu(x);
  return torch::tanh(x);
}

}  // namespace mltool::train::models
