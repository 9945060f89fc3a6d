// mltool train DATASET/ --model SPEC.json -o RUN/ [options]      dataset → trained model
//
// Option parsing, the progress bar and the summary; the training is mltool::train::train_model.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli.hpp"
#include "cli_options.hpp"
#include "mltool/predict/predict.hpp"
#include "mltool/slide/tile_pixels.hpp"
#include "mltool/train/cross_validate.hpp"
#include "mltool/train/train.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/shard.hpp"
#include "spawn.hpp"

namespace mltool::cli {
namespace {

struct TrainOptions {
  std::shared_ptr<train::TrainJob> job = std::make_shared<train::TrainJob>();
  int nproc = 0;  ///< > 0: run as this many local data parallel ranks
};

// torchrun / srun style: RANK and WORLD_SIZE (and MASTER_ADDR, MASTER_PORT, LOCAL_RANK) in
// the environment join this process to a data parallel group (of one too).
void join_from_environment(train::TrainJob& j) {
  const auto r = util::launcher_rendezvous();
  if (!r) return;
  j.rank = r->rank;
  j.world_size = r->world_size;
  j.local_rank = r->local_rank;
  if (!r->master_addr.empty()) j.master_addr = r->master_addr;
  j.master_port = r->master_port;
  j.join_group = true;  // a group even of one (torchrun --nproc-per-node 1), as DDP makes
}

std::string metric(const nlohmann::json& v, const char* key) {
  return v.contains(key) && v[key].is_number() ? format_fixed(v[key].get<double>(), 4) : "n/a";
}

// A one-line bar on stderr, redrawn each step, when stderr is a terminal; epoch summaries
// are log lines either way.
void show_progress(const train::TrainProgress& p, bool bar) {
  if (p.epoch_end) {
    if (bar) std::fputs("\r\033[K", stderr);
    std::string line = "epoch " + std::to_string(p.epoch) + "/" + std::to_string(p.epochs) +
                       ": train loss " + format_fixed(p.loss, 4);
    for (const auto& [name, value] : p.validation.items())
      if (!value.is_string())  // val_auc_mean_labels: the names behind val_auc_mean
        line += ", " + name.substr(name.rfind("val_") == 0 ? 4 : 0) + " " +
                metric(p.validation, name.c_str());
    log::info(line + (p.improved ? " (best)" : ""));
    return;
  }
  if (!bar) return;
  // At most ten redraws a second: steps can be much faster than a terminal.
  static auto last = std::chrono::steady_clock::time_point();
  const auto now = std::chrono::steady_clock::now();
  if (now - last < std::chrono::milliseconds(100) && p.epoch_step < p.steps_per_epoch) return;
  last = now;
  constexpr int kWidth = 30;
  const int filled =
      static_cast<int>(kWidth * p.epoch_step / std::max<std::int64_t>(1, p.steps_per_epoch));
  std::fprintf(stderr, "\r\033[Kepoch %d/%d [%s%s] %lld/%lld  loss %.4f  lr %.2e", p.epoch,
               p.epochs, std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), static_cast<long long>(p.epoch_step),
               static_cast<long long>(p.steps_per_epoch), p.loss, p.lr);
  std::fflush(stderr);
}

// --view: a finished run's validation slides predicted inside it, with their viewer.
void view_validation(const train::TrainJob& job, const std::string& run_dir) {
  predict::PredictJob like;
  like.device = job.device;
  like.threads = job.threads;
  like.tiles = job.tiles;
  like.dicomweb = job.dicomweb;
  const auto r = predict::predict_validation(run_dir, like);
  log::info(run_dir + ": its validation slides in a browser: " + r.view);
}

// --folds all: the folds, then the gathered summary.
int run_folds(const train::TrainJob& job, const CommonOptions& common, bool bar) {
  const auto r = train::cross_validate(
      job, [bar](int, const train::TrainProgress& p) { show_progress(p, bar); });
  if (job.rank != 0) return exit_code::ok;
  if (job.view)
    for (const auto& fold : r.cv.at("per_fold"))
      view_validation(job, util::join_path(job.output, fold.value("run", "")));
  log::info(train::summary_line(r));
  if (common.json) std::cout << r.cv.dump(2) << "\n";
  return exit_code::ok;
}

int run_train(TrainOptions& o, const CommonOptions& common) {
  if (o.nproc > 1) return spawn_local_ranks(o.nproc);
  if (o.nproc < 0) throw UsageError("--nproc must be at least 1");
  join_from_environment(*o.job);
  o.job->threads = common.threads;
  o.job->tile_pixels = slide::open_tile_pixels(o.job->dicomweb);
  if (o.job->view && o.job->rank == 0)
    predict::check_predict_validation(o.job->dataset, o.job->tiles);
  if (o.job->rank != 0) {  // rank 0 reports; the others train quietly
    // Their warnings and errors still show, marked with their rank; -v shows everything.
    log::set_prefix("mltool train (rank " + std::to_string(o.job->rank) + ")");
    if (!common.quiet && common.verbose == 0) log::set_level(log::Level::warn);
    if (o.job->all_folds)
      train::cross_validate(*o.job);
    else
      train::train_model(*o.job);
    return exit_code::ok;
  }
  const bool bar = !common.quiet && ::isatty(STDERR_FILENO);
  if (o.job->all_folds) return run_folds(*o.job, common, bar);
  const auto r =
      train::train_model(*o.job, [bar](const train::TrainProgress& p) { show_progress(p, bar); });
  if (r.status == train::RunStatus::stopped)
    log::info(r.output + ": stopped after " + std::to_string(r.steps) +
              " steps (--max-steps); continue with --resume");
  else
    log::info(r.output + ": " + train::to_string(r.status) + " after " +
              std::to_string(r.epochs_done) + " epochs, " + std::to_string(r.steps) + " steps on " +
              r.device + " (" + r.feed + " feed), " + format_fixed(r.seconds, 2) + " s, " +
              format_fixed(r.samples_per_second) + " samples/s; best " + r.monitor + " " +
              format_fixed(r.best_value, 4) + " at epoch " + std::to_string(r.best_epoch));
  if (o.job->view && r.status != train::RunStatus::stopped) view_validation(*o.job, r.output);
  if (common.json) std::cout << train::to_json(r).dump(2) << "\n";
  return exit_code::ok;
}

}  // namespace

Command train_command() {
  return {"train", "Train a model (MLP, attention MIL, residual CNN) on a packed dataset",
          [](CLI::App& app, const CommonOptions& common) -> Action {
            auto o = std::make_shared<TrainOptions>();
            add_options(app, train::train_options(), o->job);
            app.add_option("--nproc", o->nproc,
                           "Data parallel: train in this many local processes (docs/train.md)");
            return [o, &common] { return run_train(*o, common); };
          }};
}

}  // namespace mltool::cli
