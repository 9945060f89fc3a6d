#include "mltool/train/models.hpp"

#include <torch/torch.h>

#include "mltool/util/error.hpp"
#include "models/blocks.hpp"
#include "models/family.hpp"

namespace mltool::train {

void BlockModel::add(const std::string& name, std::shared_ptr<Block> block) {
  names_.push_back(name);
  blocks_.push_back(register_module(name, std::move(block)));
}

Activation BlockModel::forward(Activation in, std::size_t begin, std::size_t end) {
  if (begin > end || end > blocks_.size())
    throw UsageError("blocks [" + std::to_string(begin) + ", " + std::to_string(end) +
                     ") of a model of " + std::to_string(blocks_.size()));
  for (std::size_t i = begin; i < end; ++i) in = blocks_[i]->forward(in);
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
  const std::int64_t width = models::family(spec.family).build(*model, spec.settings, input_dims);
  model->add("head", std::make_shared<models::Head>(width, classes));
  return model;
}

}  // namespace mltool::train
