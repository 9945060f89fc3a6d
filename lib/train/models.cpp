#include "mltool/train/models.hpp"

#include <torch/torch.h>

#include "mltool/util/error.hpp"
#include "models/blocks.hpp"
#include "models/family.hpp"

namespace mltool::train {
namespace {

// A block's output `out` with what it does not set itself carried on from its input `in`.
Activation carried(Activation out, const Activation& in) {
  if (!out.attention.defined()) out.attention = in.attention;
  if (!out.extra.defined()) out.extra = in.extra;
  return out;
}

}  // namespace

void BlockModel::add(const std::string& name, std::shared_ptr<Block> block) {
  names_.push_back(name);
  blocks_.push_back(register_module(name, std::move(block)));
  for (std::size_t i = 0; i < blocks_.back()->parts(); ++i)
    parts_.emplace_back(blocks_.size() - 1, i);
}

std::vector<std::string> BlockModel::part_names() const {
  std::vector<std::string> out;
  for (const auto& [b, i] : parts_)
    out.push_back(blocks_[b]->parts() == 1 ? names_[b] : names_[b] + "." + std::to_string(i));
  return out;
}

Activation BlockModel::forward_parts(Activation in, std::size_t begin, std::size_t end) {
  if (begin > end || end > parts_.size())
    throw UsageError("parts [" + std::to_string(begin) + ", " + std::to_string(end) +
                     ") of a model of " + std::to_string(parts_.size()));
  for (std::size_t p = begin; p < end; ++p)
    in = carried(blocks_[parts_[p].first]->forward_part(in, parts_[p].second), in);
  return in;
}

std::vector<torch::Tensor> BlockModel::part_buffers(std::size_t begin, std::size_t end) {
  std::vector<torch::Tensor> out;
  for (std::size_t p = begin; p < end; ++p) {
    const auto [b, i] = parts_.at(p);
    for (auto& t : blocks_[b]->part_buffers(i)) out.push_back(t);
  }
  return out;
}

std::size_t BlockModel::first_part(std::size_t block) const {
  std::size_t p = 0;
  while (p < parts_.size() && parts_[p].first < block) ++p;
  return p;
}

std::vector<std::string> BlockModel::names_of_parts(std::size_t begin, std::size_t end) const {
  const auto all = part_names();
  std::vector<std::string> out;
  for (std::size_t p = begin; p < end;) {
    const std::size_t b = parts_[p].first;
    const std::size_t first = first_part(b), last = first_part(b + 1);
    if (p == first && last <= end) {  // the whole block
      out.push_back(names_[b]);
      p = last;
    } else {
      out.push_back(all[p]);
      ++p;
    }
  }
  return out;
}

Activation BlockModel::forward(Activation in, std::size_t begin, std::size_t end) {
  if (begin > end || end > blocks_.size())
    throw UsageError("blocks [" + std::to_string(begin) + ", " + std::to_string(end) +
                     ") of a model of " + std::to_string(blocks_.size()));
  for (std::size_t i = begin; i < end; ++i) in = carried(blocks_[i]->forward(in), in);
  return in;
}

std::int64_t BlockModel::parameter_count(std::size_t i) {
  std::int64_t n = 0;
  for (const auto& p : blocks_.at(i)->parameters()) n += p.numel();
  return n;
}

std::int64_t BlockModel::parameter_count() {
  std::int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

std::shared_ptr<BlockModel> build_model(const ModelSpec& spec, std::int64_t input_dims,
                                        std::int64_t classes) {
  auto model = std::make_shared<BlockModel>();
  const models::Family& family = models::family(spec.family);
  const std::int64_t width = family.build(*model, spec.settings, input_dims);
  if (family.head)  // the family's own classifier (clam, dsmil)
    family.head(*model, spec.settings, width, classes);
  else
    model->add("head", std::make_shared<models::Head>(width, classes));
  if (family.objective)
    model->set_objective([objective = family.objective, settings = spec.settings](
                             const StepLoss& task, const Activation& out, const torch::Tensor& y) {
      return objective(settings, task, out, y);
    });
  return model;
}

}  // namespace mltool::train
