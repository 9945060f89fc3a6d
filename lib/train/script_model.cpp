#include "script_model.hpp"

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <torch/csrc/jit/runtime/jit_exception.h>

#include "mltool/io/sha256.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "models/blocks.hpp"

namespace mltool::train {
namespace {

// The nn::Module tree mirroring a jit module's: the same tensors, registered under the same
// names, so the optimizer, the checkpoints, .to(device) and data parallel's broadcasts act on
// the module's own parameters and buffers.
void mirror(torch::nn::Module& into, const torch::jit::Module& from) {
  for (const auto& p : from.named_parameters(/*recurse=*/false))
    if (p.value.defined()) into.register_parameter(p.name, p.value, p.value.requires_grad());
  for (const auto& b : from.named_buffers(/*recurse=*/false))
    if (b.value.defined()) into.register_buffer(b.name, b.value);
  for (const auto& c : from.named_children()) {
    auto child = std::make_shared<torch::nn::Module>();
    mirror(*child, c.value);
    into.register_module(c.name, child);
  }
}

// The last non-empty line of an error's text: TorchScript's is a traceback ending in the error.
std::string last_line(const std::string& what) {
  auto end = what.find_last_not_of("\n ");
  if (end == std::string::npos) return what;
  const auto begin = what.rfind('\n', end);
  return what.substr(begin == std::string::npos ? 0 : begin + 1, end + 1 - (begin + 1));
}

std::string shape_of(const torch::Tensor& t) {
  std::string shape;
  for (const auto s : t.sizes()) shape += (shape.empty() ? "" : " x ") + std::to_string(s);
  return t.dim() == 0 ? "a scalar" : "a tensor of " + shape;
}

// One forward on `x` ("what" names it in messages): its output, errors as InputError naming
// the file.
c10::IValue call(const ScriptModel& m, const torch::Tensor& x, const std::string& what) {
  try {
    return m.module->forward({x});
  } catch (const std::exception& e) {  // torch::jit::JITException, c10::Error
    if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) throw;
    throw InputError(at_file(m.path, "forward failed on " + what + ": " + last_line(e.what())));
  }
}

// Whether `y` is the logits of a forward on `n` samples: 1 x classes (or classes) for a bag,
// n x classes for a batch of tiles.
bool is_logits(const ScriptModel& m, const torch::Tensor& y, std::int64_t n, std::int64_t classes) {
  if (m.bag && y.dim() == 1 && y.size(0) == classes) return true;
  return y.dim() == 2 && y.size(0) == n && y.size(1) == classes;
}

// The logits of a forward on `n` samples (see is_logits), 1 x classes for a bag. Anything else
// is an InputError naming the file.
torch::Tensor logits_of(const ScriptModel& m, const c10::IValue& out, std::int64_t n,
                        std::int64_t classes, const std::string& what) {
  if (!out.isTensor())
    throw InputError(at_file(m.path, "forward returned " + out.tagKind() + " for " + what +
                                         ", not one tensor of logits"));
  auto y = out.toTensor();
  if (is_logits(m, y, n, classes)) return y.dim() == 1 ? y.unsqueeze(0) : y;
  const std::string want =
      m.bag ? std::to_string(classes) + " or 1 x " + std::to_string(classes) + " (one bag's logits)"
            : std::to_string(n) + " x " + std::to_string(classes) + " (batch x classes)";
  throw InputError(
      at_file(m.path, "forward returned " + shape_of(y) + " for " + what + "; expected " + want));
}

class ScriptBlock : public Block {
 public:
  ScriptBlock(const ScriptModel& m, std::int64_t classes) : m_(m), classes_(classes) {
    mirror(*this, *m_.module);
  }

  // Tiles: one call on the batch (pixels: converted first). Bags: one call per bag on its real
  // instances (L_b x D), the logits stacked.
  Activation forward(const Activation& in) override {
    const auto n = in.x.size(0);
    if (!m_.bag) {
      const auto x = m_.pixels ? models::pixels_to_float(in.x) : in.x;
      return {logits_of(m_, call(m_, x, "a batch"), n, classes_, "a batch"), {}};
    }
    std::vector<torch::Tensor> rows;
    for (std::int64_t b = 0; b < n; ++b) {
      const auto x = in.mask.defined() ? in.x[b].index({in.mask[b]}) : in.x[b];
      rows.push_back(logits_of(m_, call(m_, x, "a bag"), 1, classes_, "a bag"));
    }
    return {torch::cat(rows), {}};
  }

  void train(bool on) override {
    Block::train(on);
    m_.module->train(on);
  }

 private:
  ScriptModel m_;
  std::int64_t classes_;
};

// One top-level child of a module whose forward runs its children in sequence: a block of its
// own, so sections can cut between children. The first one converts pixels (ScriptModel::
// pixels), the last one checks the logits.
class ChildBlock : public Block {
 public:
  ChildBlock(const ScriptModel& m, torch::jit::Module child, std::int64_t classes, bool first,
             bool last)
      : m_(m),
        child_(std::move(child)),
        classes_(classes),
        pixels_(first && m.pixels),
        last_(last) {
    mirror(*this, child_);
  }

  Activation forward(const Activation& in) override {
    c10::IValue out;
    try {
      out = child_.forward({pixels_ ? models::pixels_to_float(in.x) : in.x});
    } catch (const torch::jit::JITException& e) {
      throw InputError(at_file(m_.path, "forward failed: " + last_line(e.what())));
    }
    if (last_) return {logits_of(m_, out, in.x.size(0), classes_, "a batch"), {}};
    if (!out.isTensor())
      throw InputError(at_file(m_.path, "a child's forward returned " + out.tagKind() +
                                            ", not a tensor for the next child"));
    return {out.toTensor(), {}};
  }

  void train(bool on) override {
    Block::train(on);
    child_.train(on);
  }

 private:
  ScriptModel m_;
  torch::jit::Module child_;
  std::int64_t classes_;
  bool pixels_, last_;
};

// The probe's input in messages: "a batch of 2 x D features (float32)", a bag of 3, or "a
// batch of 2 x 3 x T x T pixels (float32 in [0, 1])".
std::string rows_of(const ScriptModel& m, std::int64_t n, const std::vector<std::int64_t>& sample) {
  std::string shape = std::to_string(n);
  for (const auto s : sample) shape += " x " + std::to_string(s);
  return (m.bag ? "a bag of " : "a batch of ") + shape +
         (m.pixels ? " pixels (float32 in [0, 1])" : " features (float32)");
}

// The probe's output `y` on n rows is not the logits. If a second forward, on n + 1 rows, shows
// the module is written for the other unit, an InputError saying so: a bag model pools any
// number of rows into one output (classes or 1 x classes), a tile model returns one row per
// row. Anything else (a forward that fails on n + 1 rows too) is left to logits_of.
void refuse_other_unit(const ScriptModel& m, const torch::Tensor& y, std::int64_t n,
                       std::int64_t dims, const std::string& manifest) {
  const auto pools = [](const torch::Tensor& t) {
    return t.dim() == 1 || (t.dim() == 2 && t.size(0) == 1);
  };
  const auto per_row = [](const torch::Tensor& t, std::int64_t rows) {
    return t.dim() == 2 && t.size(0) == rows;
  };
  c10::IValue more;
  try {
    more = m.module->forward({torch::zeros({n + 1, dims})});
  } catch (const std::exception& e) {
    if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) throw;
    return;
  }
  if (!more.isTensor()) return;
  const auto z = more.toTensor();
  const bool bag_model = !m.bag && pools(y) && z.sizes() == y.sizes();
  const bool tile_model = m.bag && per_row(y, n) && per_row(z, n + 1);
  if (!bag_model && !tile_model) return;
  const std::string bag_sig = "(forward(L x D) -> classes or 1 x classes)";
  const std::string tile_sig = "(forward(N x D) -> N x classes)";
  const std::string unit = m.bag ? "bag" : "tile";
  throw InputError(at_file(
      m.path,
      "forward returned " + shape_of(y) + " for " + rows_of(m, n, {dims}) + " and " + shape_of(z) +
          " for " + std::to_string(n + 1) + (m.bag ? " instances" : " rows") +
          (bag_model ? ": it pools the rows into one output, as a bag model does " + bag_sig
                     : ": one row of logits per instance, as a tile model returns " + tile_sig) +
          ", but " + manifest + " was packed with --unit " + unit + ": pack with --unit " +
          (m.bag ? "tile" : "bag") + ", or give a " + unit + " model " +
          (m.bag ? bag_sig : tile_sig)));
}

}  // namespace

std::vector<std::string> sequential_children(const torch::jit::Module& m) {
  if (m.named_parameters(false).size() > 0 || m.named_buffers(false).size() > 0) return {};
  const auto graph = m.get_method("forward").graph();
  if (graph->inputs().size() != 2 || graph->outputs().size() != 1) return {};
  std::set<std::string> children;
  for (const auto& c : m.named_children()) children.insert(c.name);
  const torch::jit::Value* self = graph->inputs()[0];
  const torch::jit::Value* value = graph->inputs()[1];
  std::map<const torch::jit::Value*, std::string> attrs;
  std::vector<std::string> order;
  for (const auto* n : graph->nodes()) {
    if (n->kind() == c10::prim::GetAttr && n->input(0) == self &&
        children.count(n->s(c10::attr::name))) {
      attrs[n->output()] = n->s(c10::attr::name);
      continue;
    }
    const bool call = n->kind() == c10::prim::CallMethod && n->s(c10::attr::name) == "forward" &&
                      n->inputs().size() == 2 && attrs.count(n->input(0)) && n->input(1) == value &&
                      n->outputs().size() == 1 && value->uses().size() == 1;
    if (!call) return {};
    order.push_back(attrs.at(n->input(0)));
    value = n->output();
  }
  // Each child once; none named "script" (the whole-module block's name, see export.cpp).
  const std::set<std::string> distinct(order.begin(), order.end());
  if (graph->outputs()[0] != value || order.empty() || distinct.size() != order.size() ||
      distinct.count("script"))
    return {};
  return order;
}

bool is_script_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4;
}

ScriptModel load_script_model(const std::string& path) {
  ScriptModel m;
  m.path = path;
  m.sha256 = io::sha256_hex(util::read_file(path));
  try {
    m.module = std::make_shared<torch::jit::Module>(torch::jit::load(path, torch::kCPU));
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    throw InputError(at_file(path,
                             "not a TorchScript module (torch.jit.script or trace, then "
                             ".save): " +
                                 what.substr(0, what.find('\n'))));
  }
  if (!m.module->find_method("forward"))
    throw InputError(at_file(path, "the TorchScript module has no forward method"));
  return m;
}

void probe_script(const ScriptModel& m, const std::vector<std::int64_t>& sample,
                  std::int64_t classes, const std::string& manifest) {
  const std::int64_t n = m.bag ? 3 : 2;
  torch::NoGradGuard no_grad;
  const bool training = m.module->is_training();
  m.module->eval();
  const auto what = rows_of(m, n, sample);
  std::vector<std::int64_t> shape{n};
  shape.insert(shape.end(), sample.begin(), sample.end());
  const auto out = call(m, torch::zeros(shape), what);
  if (!m.pixels && out.isTensor() && !is_logits(m, out.toTensor(), m.bag ? 1 : n, classes))
    refuse_other_unit(m, out.toTensor(), n, sample.at(0), manifest);
  m.module->train(training);
  logits_of(m, out, m.bag ? 1 : n, classes, what);
}

std::shared_ptr<BlockModel> script_block_model(const ScriptModel& m, std::int64_t classes) {
  auto model = std::make_shared<BlockModel>();
  const auto children = m.bag ? std::vector<std::string>{} : sequential_children(*m.module);
  if (children.empty()) {
    model->add("script", std::make_shared<ScriptBlock>(m, classes));
    return model;
  }
  for (std::size_t i = 0; i < children.size(); ++i)
    model->add(children[i],
               std::make_shared<ChildBlock>(m, m.module->attr(children[i]).toModule(), classes,
                                            i == 0, i + 1 == children.size()));
  return model;
}

void save_script(const torch::jit::Module& m, const std::string& path) {
  auto copy = m.clone();
  copy.to(torch::kCPU);
  copy.eval();
  std::ostringstream out;
  copy.save(out);
  util::write_file_atomic(path, out.str());
}

}  // namespace mltool::train
