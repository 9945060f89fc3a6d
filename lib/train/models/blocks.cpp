#include "blocks.hpp"

namespace mltool::train::models {

torch::Tensor activate(const std::string& name, const torch::Tensor& x) {
  if (name == "relu") return torch::relu(x);
  if (name == "gelu") return torch::gelu(x);
  if (name == "silu") return torch::silu(x);
  return torch::tanh(x);
}

// On a GPU the permuted view stays channels-last (NHWC in memory), as PyTorch's own
// `x.permute(0, 3, 1, 2).float()` does, so cuDNN runs its channels-last convolutions and batch
// norm: the layout of the PyTorch loop that stepped in 79.5 ms where mltool's NCHW took
// 177.7 ms (H200, 2026-11-27). On the CPU, contiguous NCHW: on a channels-last input oneDNN's
// AVX-512 kernel for a strided 1x1 convolution's weight gradient (the shortcut of a strided
// stage) reads out of bounds for larger tiles, a segfault in LibTorch 2.11 reproduced in
// PyTorch alone.
torch::Tensor pixels_to_float(const torch::Tensor& x) {
  auto y = x.permute({0, 3, 1, 2});
  if (!y.is_cuda()) y = y.contiguous();
  return y.to(torch::kFloat32).div(255.0);
}

}  // namespace mltool::train::models
