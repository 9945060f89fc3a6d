// Model specs (lib/train/model_spec.cpp): defaults, and errors that name the JSON pointer;
// the block models they build (lib/train/models.cpp): block and parameter names, and that any
// split of the blocks composes to the whole forward pass.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include "mltool/train/model_spec.hpp"
#include "mltool/train/models.hpp"
#include "mltool/util/error.hpp"
#include "support/errors.hpp"
#include "support/temp_dir.hpp"

namespace mltool::train {
namespace {

using json = nlohmann::json;
using testing::contains;
using testing::error_of;

std::string spec_error(const json& doc) {
  return error_of<FormatError>([&] { parse_model_spec(doc, "spec.json"); });
}

TEST(ModelSpec, DefaultsPerFamily) {
  const auto mlp = parse_model_spec(json{{"family", "mlp"}}, "spec.json");
  EXPECT_EQ(mlp.unit(), mltool::records::PackUnit::tile);
  EXPECT_TRUE(mlp.settings["hidden"].empty());
  EXPECT_EQ(mlp.settings["activation"], "relu");
  EXPECT_EQ(mlp.document, (json{{"family", "mlp"},
                                {"activation", "relu"},
                                {"dropout", 0.0},
                                {"hidden", json::array()},
                                {"batch_norm", false}}));
  const auto abmil = parse_model_spec(json{{"family", "abmil"}, {"attention", 32}}, "spec.json");
  EXPECT_EQ(abmil.unit(), mltool::records::PackUnit::bag);
  EXPECT_EQ(abmil.settings["hidden"], json::array({128}));
  EXPECT_EQ(abmil.settings["attention"], 32);
  EXPECT_EQ(abmil.settings["gated"], true);
  const auto cnn = parse_model_spec(
      json{{"family", "rescnn"}, {"channels", {8, 16}}, {"mean", {0.5, 0.5, 0.5}}}, "s");
  EXPECT_EQ(cnn.unit(), mltool::records::PackUnit::image);
  EXPECT_EQ(cnn.settings["channels"], json::array({8, 16}));
  EXPECT_EQ(cnn.settings["mean"][1], 0.5);
  EXPECT_NEAR(cnn.settings["std"][2].get<double>(), 0.225, 1e-12);
  EXPECT_EQ(cnn.settings["stem_stride"], 2);
  const auto pinned = parse_model_spec(json{{"family", "mlp"},
                                            {"input_dims", 32},
                                            {"classes", 3},
                                            {"format", "mltool.model"},
                                            {"format_version", 1}},
                                       "s");
  EXPECT_EQ(pinned.input_dims.value_or(0), 32);
  EXPECT_EQ(pinned.classes.value_or(0), 3);
}

TEST(ModelSpec, ErrorsNameThePointer) {
  EXPECT_TRUE(
      contains(spec_error(json{{"hidden", {4}}}), "spec.json: /family: required field is missing"));
  EXPECT_TRUE(
      contains(spec_error(json{{"family", "transformer"}}), "spec.json: /family: expected one of"));
  EXPECT_TRUE(contains(spec_error(json{{"family", "mlp"}, {"hidden", {64, 0}}}),
                       "spec.json: /hidden/1: expected integer between 1 and 1048576, got 0"));
  EXPECT_TRUE(
      contains(spec_error(json{{"family", "mlp"}, {"dropout", 1.5}}), "spec.json: /dropout:"));
  EXPECT_TRUE(contains(spec_error(json{{"family", "mlp"}, {"batch_norm", "yes"}}),
                       "spec.json: /batch_norm:"));
  EXPECT_TRUE(contains(spec_error(json{{"family", "mlp"}, {"widths", {4}}}),
                       "spec.json: /widths: unexpected field"));
  EXPECT_TRUE(
      contains(spec_error(json{{"family", "rescnn"}, {"mean", {0.5, 0.5}}}), "spec.json: /mean:"));
  EXPECT_TRUE(
      contains(spec_error(json{{"family", "mlp"}, {"classes", 0}}), "spec.json: /classes:"));
  EXPECT_TRUE(
      contains(spec_error(json{{"family", "mlp"}, {"format", "mltool.dataset"}}), "/format"));
  // A field of another family is named, with the family's own fields.
  const auto other = spec_error(json{{"family", "mlp"}, {"channels", {8}}});
  EXPECT_TRUE(contains(other, "spec.json: /channels: not a field of family mlp")) << other;
  EXPECT_TRUE(contains(other, "batch_norm")) << other;
  EXPECT_TRUE(contains(spec_error(json{{"family", "abmil"}, {"batch_norm", true}}),
                       "/batch_norm: not a field of family abmil"));
  EXPECT_TRUE(contains(spec_error(json{{"family", "abmil"}, {"hidden", json::array()}}),
                       "spec.json: /hidden:"));
  EXPECT_TRUE(contains(spec_error(json::array()), "spec.json: (root): expected object"));
}

TEST(ModelSpec, ReadsFiles) {
  testing::TempDir dir;
  std::ofstream(dir / "bad.json") << "{\"family\": \"mlp\",, }";
  const auto message = error_of<FormatError>([&] { read_model_spec(dir / "bad.json"); });
  EXPECT_TRUE(contains(message, dir / "bad.json: byte 17: invalid JSON")) << message;
  EXPECT_TRUE(contains(error_of<InputError>([&] { read_model_spec(dir / "missing.json"); }),
                       "missing.json"));
  std::ofstream(dir / "ok.json") << R"({"family": "mlp", "hidden": [8]})";
  EXPECT_EQ(read_model_spec(dir / "ok.json").settings["hidden"], json::array({8}));
}

std::vector<std::string> state_names(BlockModel& m) {
  std::vector<std::string> out;
  for (const auto& p : m.named_parameters()) out.push_back(p.key());
  for (const auto& b : m.named_buffers()) out.push_back(b.key());
  return out;
}

TEST(Models, NamedBlocksAndParameters) {
  torch::manual_seed(0);
  auto mlp = build_model(
      parse_model_spec(json{{"family", "mlp"}, {"hidden", {16, 8}}, {"batch_norm", true}}, "s"), 12,
      3);
  EXPECT_EQ(mlp->names(), (std::vector<std::string>{"hidden1", "hidden2", "head"}));
  const auto names = state_names(*mlp);
  for (const char* n : {"hidden1.linear.weight", "hidden1.norm.running_var", "hidden2.linear.bias",
                        "head.linear.weight"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  EXPECT_EQ(mlp->parameter_count(2), 8 * 3 + 3);
  EXPECT_EQ(mlp->parameter_count(), (12 * 16 + 16 + 32) + (16 * 8 + 8 + 16) + (8 * 3 + 3));

  auto abmil = build_model(
      parse_model_spec(json{{"family", "abmil"}, {"hidden", {8}}, {"attention", 4}}, "s"), 6, 2);
  EXPECT_EQ(abmil->names(), (std::vector<std::string>{"embed1", "attention", "head"}));
  const auto an = state_names(*abmil);
  for (const char* n : {"attention.V.weight", "attention.U.weight", "attention.w.weight"})
    EXPECT_NE(std::find(an.begin(), an.end(), n), an.end()) << n;

  auto cnn =
      build_model(parse_model_spec(json{{"family", "rescnn"}, {"channels", {4, 8}}}, "s"), 1, 2);
  EXPECT_EQ(cnn->names(), (std::vector<std::string>{"stem", "stage1", "stage2", "pool", "head"}));
  const auto cn = state_names(*cnn);
  for (const char* n : {"stem.conv.weight", "stem.mean", "stage2.0.conv1.weight",
                        "stage2.0.shortcut.weight", "head.linear.bias"})
    EXPECT_NE(std::find(cn.begin(), cn.end(), n), cn.end()) << n;
}

TEST(Models, BlockRangesCompose) {
  torch::manual_seed(1);
  auto mlp = build_model(
      parse_model_spec(json{{"family", "mlp"}, {"hidden", {16, 8}}, {"batch_norm", true}}, "s"), 12,
      3);
  mlp->eval();
  const auto x = torch::randn({5, 12});
  const auto whole = mlp->forward(Activation{x, {}});
  EXPECT_EQ(whole.sizes(), (std::vector<std::int64_t>{5, 3}));
  for (std::size_t cut = 0; cut <= mlp->size(); ++cut) {
    const auto mid = mlp->forward(Activation{x, {}}, 0, cut);
    EXPECT_TRUE(torch::equal(mlp->forward(mid, cut, mlp->size()).x, whole)) << cut;
  }
  EXPECT_THROW(mlp->forward(Activation{x, {}}, 2, 1), UsageError);

  // abmil: padding instances change nothing, whatever they hold.
  auto abmil = build_model(
      parse_model_spec(json{{"family", "abmil"}, {"hidden", {8}}, {"attention", 4}}, "s"), 6, 2);
  abmil->eval();
  const auto bag = torch::randn({1, 3, 6});
  const auto alone = abmil->forward(Activation{bag, torch::ones({1, 3}, torch::kBool)});
  const auto padded = torch::cat({bag, torch::full({1, 2, 6}, 7.0)}, 1);
  const auto mask = torch::tensor({1, 1, 1, 0, 0}, torch::kBool).view({1, 5});
  EXPECT_TRUE(torch::allclose(abmil->forward(Activation{padded, mask}), alone, 1e-6, 1e-6));

  auto cnn =
      build_model(parse_model_spec(json{{"family", "rescnn"}, {"channels", {4, 8}}}, "s"), 1, 3);
  const auto tiles = torch::randint(0, 256, {2, 16, 16, 3}, torch::kUInt8);
  EXPECT_EQ(cnn->forward(Activation{tiles, {}}).sizes(), (std::vector<std::int64_t>{2, 3}));
}

}  // namespace
}  // namespace mltool::train
