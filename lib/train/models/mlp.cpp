// mlp: hidden1 … hiddenN (linear [+ batch norm] + activation + dropout) on tile features.
#include "blocks.hpp"
#include "family.hpp"

namespace mltool::train::models {
namespace {

using json = nlohmann::json;

json settings(const json& doc, const std::string&) {
  return {{"activation", doc.value("activation", "relu")},
          {"dropout", doc.value("dropout", 0.0)},
          {"hidden", doc.value("hidden", std::vector<std::int64_t>{})},
          {"batch_norm", doc.value("batch_norm", false)}};
}

std::int64_t build(BlockModel& model, const json& s, std::int64_t width) {
  const auto hidden = s.at("hidden").get<std::vector<std::int64_t>>();
  for (std::size_t i = 0; i < hidden.size(); ++i) {
    model.add("hidden" + std::to_string(i + 1),
              std::make_shared<Dense>(width, hidden[i], s.at("batch_norm").get<bool>(),
                                      s.at("activation").get<std::string>(),
                                      s.at("dropout").get<double>()));
    width = hidden[i];
  }
  return width;
}

}  // namespace

const Family& mlp() {
  static const Family family{"mlp",
                             records::PackUnit::tile,
                             {"activation", "batch_norm", "dropout", "hidden"},
                             &settings,
                             &build};
  return family;
}

}  // namespace mltool::train::models
