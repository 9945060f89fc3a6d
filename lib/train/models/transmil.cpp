// transmil: TransMIL (Shao et al., NeurIPS 2021) on bags of tile features, as the reference
// (github.com/szc19990412/TransMIL, models/TransMIL.py) builds it: fc1 (linear + ReLU per
// instance), the bag laid out as a square grid (its first instances repeated to fill it) after
// a class token, a transformer layer of Nyström attention (Xiong et al. 2021, as
// lucidrains/nystrom-attention computes it), PPEG (7/5/3 depthwise convolutions on the grid),
// a second layer, layer norm of the class token, then the head.
//
// Each bag of a batch is computed alone on its own tokens (a loop over the batch): Nyström
// landmarks, its pseudo-inverse's scale and the grid all depend on the bag's length, and a
// bag's result must not depend on what it is batched with (micro-batches, data parallel,
// resume). Between the blocks a batch travels as B × T × C tokens, T = 1 + the largest grid of
// the batch, with a mask whose true entries are the class token and the bag's n instances
// (the first 1 + n tokens); the grid's repeated instances follow them, at 1 + n … side², and
// are read from n alone, since side = ceil(sqrt(n)).
#include <algorithm>
#include <cmath>

#include "blocks.hpp"
#include "family.hpp"
#include "mltool/util/error.hpp"

namespace mltool::train::models {
namespace {

using json = nlohmann::json;
namespace F = torch::nn::functional;

constexpr std::int64_t kResidualKernel = 33;  // the reference's residual_conv_kernel

// ceil(sqrt(n)) in integers: the side of the square grid a bag of n instances fills.
std::int64_t grid_side(std::int64_t n) {
  auto s = static_cast<std::int64_t>(std::sqrt(static_cast<double>(n)));
  while (s * s < n) ++s;
  while (s > 0 && (s - 1) * (s - 1) >= n) --s;
  return s;
}

// The real rows of each bag: the mask's true entries (every row without a mask). Before the
// class token these are the instances; after it, the class token and the instances.
std::vector<std::int64_t> real_rows(const Activation& in) {
  if (!in.mask.defined()) return std::vector<std::int64_t>(in.x.size(0), in.x.size(1));
  const auto n = in.mask.sum(1).to(torch::kCPU, torch::kInt64).contiguous();
  return {n.data_ptr<std::int64_t>(), n.data_ptr<std::int64_t>() + n.numel()};
}

// Each bag's instances n, from a token batch (class token first).
std::vector<std::int64_t> instances(const Activation& in) {
  auto n = real_rows(in);
  for (auto& v : n) v -= 1;
  return n;
}

// The tokens of a bag of n instances: the class token and its grid.
std::int64_t tokens(std::int64_t n) {
  const auto s = grid_side(n);
  return 1 + s * s;
}

// Rows of different lengths (each L_b × ...) stacked into B × length × ..., zero-padded.
torch::Tensor stack_padded(const std::vector<torch::Tensor>& rows, std::int64_t length) {
  std::vector<torch::Tensor> padded;
  padded.reserve(rows.size());
  for (const auto& r : rows) {
    std::vector<std::int64_t> pad(2 * (r.dim() - 1), 0);
    pad.push_back(0);
    pad.push_back(length - r.size(0));
    padded.push_back(F::pad(r, F::PadFuncOptions(pad)));
  }
  return torch::stack(padded);
}

// B × length mask, true on each bag's first `real[b]` rows; made of kernels with scalar
// arguments (no copy from the host).
torch::Tensor prefix_mask(const std::vector<std::int64_t>& real, std::int64_t length,
                          const torch::TensorOptions& options) {
  const auto positions = torch::arange(length, options.dtype(torch::kInt64));
  std::vector<torch::Tensor> rows;
  for (const auto n : real) rows.push_back(positions.lt(n));
  return torch::stack(rows);
}

// The Moore-Penrose pseudo-inverse by `iterations` of the iteration of Razavi et al. (2014),
// scaled as lucidrains' moore_penrose_iter_pinv: by the largest row and column sums of |x| over
// the whole tensor (one bag: over its heads).
torch::Tensor iterative_pinv(const torch::Tensor& x, std::int64_t iterations) {
  const auto a = x.abs();
  auto z = x.transpose(-1, -2) / (a.sum(-1).max() * a.sum(-2).max());
  const auto eye = torch::eye(x.size(-1), x.options()).unsqueeze(0);
  for (std::int64_t i = 0; i < iterations; ++i) {
    const auto xz = x.matmul(z);
    z = (0.25 * z).matmul(13 * eye - xz.matmul(15 * eye - xz.matmul(7 * eye - xz)));
  }
  return z;
}

struct Shape {
  std::int64_t dim, heads, dim_head, landmarks, iterations;
  double dropout;
};

// Nyström self-attention of one bag's tokens (1 × n × dim), as lucidrains' NystromAttention
// without a mask: zero rows in front to a multiple of the landmarks, landmarks the means of
// consecutive groups of queries and keys, softmax(QK̃ᵀ) pinv(softmax(Q̃K̃ᵀ)) softmax(Q̃Kᵀ) V plus
// a depthwise convolution of V along the tokens, the heads merged by to_out (+ dropout).
class NystromAttention : public torch::nn::Module {
 public:
  explicit NystromAttention(const Shape& s) : s_(s) {
    const auto inner = s.heads * s.dim_head;
    to_qkv_ = register_module(
        "to_qkv", torch::nn::Linear(torch::nn::LinearOptions(s.dim, 3 * inner).bias(false)));
    to_out_ = register_module("to_out", torch::nn::Linear(inner, s.dim));
    res_conv_ = register_module(
        "res_conv",
        torch::nn::Conv2d(torch::nn::Conv2dOptions(s.heads, s.heads, {kResidualKernel, 1})
                              .padding({kResidualKernel / 2, 0})
                              .groups(s.heads)
                              .bias(false)));
  }

  // `cls_attention`, when given, receives the class token's row of the attention matrix
  // (softmax(QK̃ᵀ) pinv(...) softmax(Q̃Kᵀ), the mean over the heads) over the n tokens.
  torch::Tensor forward(const torch::Tensor& x, torch::Tensor* cls_attention) {
    const std::int64_t n = x.size(1), m = s_.landmarks;
    const std::int64_t pad = (m - n % m) % m, l = (n + m - 1) / m;
    const auto xp = pad > 0 ? F::pad(x, F::PadFuncOptions({0, 0, pad, 0})) : x;
    const auto qkv = to_qkv_->forward(xp).chunk(3, -1);
    const auto split = [&](const torch::Tensor& t) {  // 1 × tokens × (h d) → 1 × h × tokens × d
      return t.reshape({1, -1, s_.heads, s_.dim_head}).permute({0, 2, 1, 3});
    };
    const auto q = split(qkv[0]) * std::pow(static_cast<double>(s_.dim_head), -0.5);
    const auto k = split(qkv[1]), v = split(qkv[2]);
    const auto landmarks = [&](const torch::Tensor& t) {
      return t.reshape({1, s_.heads, m, l, s_.dim_head}).sum(3) / l;
    };
    const auto q_l = landmarks(q), k_l = landmarks(k);
    const auto attn1 = torch::softmax(q.matmul(k_l.transpose(-1, -2)), -1);
    const auto attn2 = torch::softmax(q_l.matmul(k_l.transpose(-1, -2)), -1);
    const auto attn3 = torch::softmax(q_l.matmul(k.transpose(-1, -2)), -1);
    const auto attn2_inv = iterative_pinv(attn2, s_.iterations);
    auto out = attn1.matmul(attn2_inv).matmul(attn3.matmul(v)) + res_conv_->forward(v);
    out = out.permute({0, 2, 1, 3}).reshape({1, -1, s_.heads * s_.dim_head});
    out = torch::dropout(to_out_->forward(out), s_.dropout, is_training());
    if (cls_attention) {
      torch::NoGradGuard no_grad;
      const auto row =
          attn1.detach().narrow(2, pad, 1).matmul(attn2_inv.detach()).matmul(attn3.detach());
      *cls_attention = row.mean(1).reshape({-1}).narrow(0, pad, n);
    }
    return out.narrow(1, pad, n);
  }

 private:
  Shape s_;
  torch::nn::Linear to_qkv_{nullptr}, to_out_{nullptr};
  torch::nn::Conv2d res_conv_{nullptr};
};

// The class token's attention over a bag's grid tokens (1 + side² values, the class token's
// own first) as weights of its n instances: a repeated instance's share added to the one it
// repeats, the class token's dropped, the rest divided by their sum.
torch::Tensor instance_weights(const torch::Tensor& cls_row, std::int64_t n) {
  const auto grid = cls_row.narrow(0, 1, cls_row.size(0) - 1);
  auto w = grid.narrow(0, 0, n).clone();
  const auto repeats = grid.size(0) - n;
  if (repeats > 0) w.narrow(0, 0, repeats).add_(grid.narrow(0, n, repeats));
  return w / w.sum();
}

// fc1's output (B × L × dim, mask) → tokens: the class token, each bag's n instances and its
// first side² − n instances again (the reference's square padding).
class ClassToken : public Block {
 public:
  explicit ClassToken(std::int64_t dim) {
    token_ = register_parameter("token", torch::randn({1, 1, dim}));
  }
  Activation forward(const Activation& in) override {
    const auto n = real_rows(in);
    std::vector<torch::Tensor> bags;
    std::vector<std::int64_t> real;
    std::int64_t length = 0;
    for (std::size_t b = 0; b < n.size(); ++b) {
      const auto h = in.x[static_cast<std::int64_t>(b)].narrow(0, 0, n[b]);
      const auto repeats = tokens(n[b]) - 1 - n[b];
      bags.push_back(torch::cat({token_[0], h, h.narrow(0, 0, repeats)}));
      real.push_back(1 + n[b]);
      length = std::max(length, tokens(n[b]));
    }
    return {stack_padded(bags, length), prefix_mask(real, length, in.x.options()), {}};
  }

 private:
  torch::Tensor token_;
};

// x + attention(norm(x)) on each bag's tokens; the last layer also tells the class token's
// attention over the bag's instances (Activation::attention, B × the longest bag).
class TransLayer : public Block {
 public:
  TransLayer(const Shape& s, bool tells_attention) : tells_attention_(tells_attention) {
    norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({s.dim})));
    attn_ = register_module("attn", std::make_shared<NystromAttention>(s));
  }
  Activation forward(const Activation& in) override {
    const auto n = instances(in);
    std::vector<torch::Tensor> bags, weights;
    for (std::size_t b = 0; b < n.size(); ++b) {
      const auto x = in.x[static_cast<std::int64_t>(b)].narrow(0, 0, tokens(n[b])).unsqueeze(0);
      torch::Tensor cls_row;
      bags.push_back((x + attn_->forward(norm_->forward(x), tells_attention_ ? &cls_row : nullptr))
                         .squeeze(0));
      if (tells_attention_) weights.push_back(instance_weights(cls_row, n[b]));
    }
    Activation out{stack_padded(bags, in.x.size(1)), in.mask, {}};
    if (tells_attention_)
      out.attention = stack_padded(weights, *std::max_element(n.begin(), n.end()));
    return out;
  }

 private:
  bool tells_attention_;
  torch::nn::LayerNorm norm_{nullptr};
  std::shared_ptr<NystromAttention> attn_;
};

// PPEG: each bag's grid tokens as a dim × side × side image (row by row), plus its 7 × 7, 5 × 5
// and 3 × 3 depthwise convolutions; the class token passes.
class Ppeg : public Block {
 public:
  explicit Ppeg(std::int64_t dim) {
    static const std::pair<const char*, std::int64_t> kConvs[] = {
        {"proj", 7}, {"proj1", 5}, {"proj2", 3}};
    for (const auto& [name, k] : kConvs)
      convs_.push_back(register_module(
          name,
          torch::nn::Conv2d(torch::nn::Conv2dOptions(dim, dim, k).padding(k / 2).groups(dim))));
  }
  Activation forward(const Activation& in) override {
    const auto n = instances(in);
    const auto dim = in.x.size(2);
    std::vector<torch::Tensor> bags;
    for (std::size_t b = 0; b < n.size(); ++b) {
      const auto side = grid_side(n[b]);
      const auto x = in.x[static_cast<std::int64_t>(b)];
      const auto grid = x.narrow(0, 1, side * side).transpose(0, 1).reshape({1, dim, side, side});
      auto y = grid;
      for (auto& conv : convs_) y = y + conv->forward(grid);
      bags.push_back(torch::cat({x.narrow(0, 0, 1), y.flatten(2)[0].transpose(0, 1)}));
    }
    return {stack_padded(bags, in.x.size(1)), in.mask, {}};
  }

 private:
  std::vector<torch::nn::Conv2d> convs_;
};

// Layer norm of each bag's class token: B × dim, what the head reads.
class ClassNorm : public Block {
 public:
  explicit ClassNorm(std::int64_t dim) {
    norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
  }
  Activation forward(const Activation& in) override {
    return {norm_->forward(in.x.select(1, 0)), {}, {}};
  }

 private:
  torch::nn::LayerNorm norm_{nullptr};
};

json settings(const json& doc, const std::string&) {
  const auto dim = doc.value("dim", std::int64_t{512});
  return {{"dim", dim},
          {"heads", doc.value("heads", std::int64_t{8})},
          {"dim_head", doc.value("dim_head", dim / 8)},
          {"landmarks", doc.value("landmarks", dim / 2)},
          {"pinv_iterations", doc.value("pinv_iterations", std::int64_t{6})},
          {"dropout", doc.value("dropout", 0.1)}};
}

std::int64_t build(BlockModel& model, const json& s, std::int64_t width) {
  const Shape shape{s.at("dim").get<std::int64_t>(),
                    s.at("heads").get<std::int64_t>(),
                    s.at("dim_head").get<std::int64_t>(),
                    s.at("landmarks").get<std::int64_t>(),
                    s.at("pinv_iterations").get<std::int64_t>(),
                    s.at("dropout").get<double>()};
  model.add("fc1", std::make_shared<Dense>(width, shape.dim, false, "relu", 0.0));
  model.add("cls", std::make_shared<ClassToken>(shape.dim));
  model.add("layer1", std::make_shared<TransLayer>(shape, false));
  model.add("ppeg", std::make_shared<Ppeg>(shape.dim));
  model.add("layer2", std::make_shared<TransLayer>(shape, true));
  model.add("norm", std::make_shared<ClassNorm>(shape.dim));
  return shape.dim;
}

}  // namespace

const Family& transmil() {
  static const Family family{
      "transmil",
      records::PackUnit::bag,
      {"dim", "dim_head", "dropout", "heads", "landmarks", "pinv_iterations"},
      &settings,
      &build};
  return family;
}

}  // namespace mltool::train::models
