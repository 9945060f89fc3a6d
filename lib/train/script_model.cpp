#include "script_model.hpp"

#include <fstream>
#include <sstream>

#include <torch/csrc/jit/runtime/jit_exception.h>

#include "mltool/records/sha256.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

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

// The logits of a forward on `n` samples: one n x classes tensor, else InputError naming the file.
torch::Tensor logits_of(const std::string& path, const c10::IValue& out, std::int64_t n,
                        std::int64_t classes) {
  if (!out.isTensor())
    throw InputError(at_file(path, "forward returned " + out.tagKind() +
                                       ", not one tensor of logits (batch x classes)"));
  auto y = out.toTensor();
  if (y.dim() != 2 || y.size(0) != n || y.size(1) != classes) {
    std::string shape;
    for (const auto s : y.sizes()) shape += (shape.empty() ? "" : " x ") + std::to_string(s);
    throw InputError(at_file(path, "forward returned a tensor of " + shape + " for a batch of " +
                                       std::to_string(n) + "; expected " + std::to_string(n) +
                                       " x " + std::to_string(classes) + " (batch x classes)"));
  }
  return y;
}

class ScriptBlock : public Block {
 public:
  ScriptBlock(const ScriptModel& m, std::int64_t classes)
      : module_(m.module), path_(m.path), classes_(classes) {
    mirror(*this, *module_);
  }

  Activation forward(const Activation& in) override {
    c10::IValue out;
    try {
      out = module_->forward({in.x});
    } catch (const torch::jit::JITException& e) {
      throw InputError(at_file(path_, "forward failed: " + last_line(e.what())));
    }
    return {logits_of(path_, out, in.x.size(0), classes_), {}};
  }

  void train(bool on) override {
    Block::train(on);
    module_->train(on);
  }

 private:
  std::shared_ptr<torch::jit::Module> module_;
  std::string path_;
  std::int64_t classes_;
};

}  // namespace

bool is_script_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4;
}

ScriptModel load_script_model(const std::string& path) {
  ScriptModel m;
  m.path = path;
  m.sha256 = records::sha256_hex(util::read_file(path));
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

void probe_script(const ScriptModel& m, std::int64_t input_dims, std::int64_t classes) {
  const std::int64_t n = 2;
  torch::NoGradGuard no_grad;
  const bool training = m.module->is_training();
  m.module->eval();
  c10::IValue out;
  try {
    out = m.module->forward({torch::zeros({n, input_dims})});
  } catch (const std::exception& e) {  // torch::jit::JITException, c10::Error
    throw InputError(at_file(m.path, "forward failed on a batch of " + std::to_string(n) + " x " +
                                         std::to_string(input_dims) +
                                         " features (float32): " + last_line(e.what())));
  }
  m.module->train(training);
  logits_of(m.path, out, n, classes);
}

std::shared_ptr<BlockModel> script_block_model(const ScriptModel& m, std::int64_t classes) {
  auto model = std::make_shared<BlockModel>();
  model->add("script", std::make_shared<ScriptBlock>(m, classes));
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
