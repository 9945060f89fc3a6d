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
#include "mltool/train/train.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"
#include "spawn.hpp"

namespace mltool::cli {
namespace {

struct TrainOptions {
  train::TrainJob job;
  int nproc = 0;  ///< > 0: run as this many local data parallel ranks
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > 1 << 30)
    throw UsageError(std::string("environment variable ") + name + "='" + v +
                     "' is not a non-negative integer");
  return static_cast<int>(n);
}

// torchrun / srun style: RANK and WORLD_SIZE (and MASTER_ADDR, MASTER_PORT, LOCAL_RANK) in
// the environment join this process to a data parallel group (of one too).
void join_from_environment(train::TrainJob& j) {
  if (!std::getenv("RANK") || !std::getenv("WORLD_SIZE")) return;
  j.rank = env_int("RANK", 0);
  j.world_size = env_int("WORLD_SIZE", 1);
  j.local_rank = env_int("LOCAL_RANK", 0);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) j.master_addr = a;
  j.master_port = env_int("MASTER_PORT", 0);
  j.join_group = true;  // a group even of one (torchrun --nproc-per-node 1), as DDP makes
  if (j.master_port == 0) throw UsageError("RANK and WORLD_SIZE are set, but MASTER_PORT is not");
}

std::string metric(const nlohmann::json& v, const char* key) {
  return v.contains(key) && v[key].is_number() ? format_fixed(v[key].get<double>(), 4) : "n/a";
}

// A one-line bar on stderr, redrawn each step, when stderr is a terminal; epoch summaries
// are log lines either way.
void show_progress(const train::TrainProgress& p, bool bar) {
  if (p.epoch_end) {
    if (bar) std::fputs("\r\033[K", stderr);
    log::info("epoch " + std::to_string(p.epoch) + "/" + std::to_string(p.epochs) +
              ": train loss " + format_fixed(p.loss, 4) + ", val loss " +
              metric(p.validation, "val_loss") + ", accuracy " +
              metric(p.validation, "val_accuracy") + ", balanced " +
              metric(p.validation, "val_balanced_accuracy") + ", AUC " +
              metric(p.validation, "val_auc") + (p.improved ? " (best)" : ""));
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

int run_train(TrainOptions& o, const CommonOptions& common) {
  if (o.nproc > 1) return spawn_local_ranks(o.nproc);
  if (o.nproc < 0) throw UsageError("--nproc must be at least 1");
  join_from_environment(o.job);
  o.job.threads = common.threads;
  if (o.job.rank != 0) {  // rank 0 reports; the others train quietly
    // Their warnings and errors still show, marked with their rank; -v shows everything.
    log::set_prefix("mltool train (rank " + std::to_string(o.job.rank) + ")");
    if (!common.quiet && common.verbose == 0) log::set_level(log::Level::warn);
    const auto r = train::train_model(o.job);
    (void)r;
    return exit_code::ok;
  }
  const bool bar = !common.quiet && ::isatty(STDERR_FILENO);
  const auto r =
      train::train_model(o.job, [bar](const train::TrainProgress& p) { show_progress(p, bar); });
  if (r.status == "stopped")
    log::info(r.output + ": stopped after " + std::to_string(r.steps) +
              " steps (--max-steps); continue with --resume");
  else
    log::info(r.output + ": " + r.status + " after " + std::to_string(r.epochs_done) + " epochs, " +
              std::to_string(r.steps) + " steps on " + r.device + " (" + r.feed + " feed), " +
              format_fixed(r.seconds, 2) + " s, " + format_fixed(r.samples_per_second) +
              " samples/s; best " + r.monitor + " " + format_fixed(r.best_value, 4) + " at epoch " +
              std::to_string(r.best_epoch));
  if (common.json)
    std::cout << nlohmann::json{{"command", "train"},
                                {"output", r.output},
                                {"status", r.status},
                                {"unit", r.unit},
                                {"device", r.device},
                                {"feed", r.feed},
                                {"blocks", r.blocks},
                                {"parameters", r.parameters},
                                {"steps", r.steps},
                                {"resumed_from", r.resumed_from},
                                {"epochs", r.epochs_done},
                                {"monitor", r.monitor},
                                {"best_epoch", r.best_epoch},
                                {"best_value", r.best_value},
                                {"validation", r.validation},
                                {"memory",
                                 {{"mode", r.memory_mode},
                                  {"micro_batches", o.job.micro_batches},
                                  {"sections", r.sections},
                                  {"activation_bytes", r.activation_bytes},
                                  {"device_peak_bytes", r.device_peak_bytes >= 0
                                                            ? nlohmann::json(r.device_peak_bytes)
                                                            : nlohmann::json()}}},
                                {"data_parallel",
                                 r.dist_buckets > 0 ? nlohmann::json{{"buckets", r.dist_buckets},
                                                                     {"launched_in_backward",
                                                                      r.dist_launched_in_backward}}
                                                    : nlohmann::json()},
                                {"seconds", r.seconds},
                                {"samples_per_second", r.samples_per_second}}
                     .dump(2)
              << "\n";
  return exit_code::ok;
}

}  // namespace

Command train_command() {
  return {
      "train", "Train a model (MLP, attention MIL, residual CNN) on a packed dataset",
      [](CLI::App& app, const CommonOptions& common) -> Action {
        auto o = std::make_shared<TrainOptions>();
        auto& j = o->job;
        app.add_option("dataset", j.dataset, "The dataset directory (mltool pack)")->required();
        app.add_option("--model", j.spec, "The model spec, JSON (docs/train.md#model-specs)")
            ->required();
        app.add_option("-o,--output", j.output,
                       "The run directory (created; see --resume, --overwrite)")
            ->required();
        app.add_option("--feed", j.feed,
                       "auto (pinned if it fits), pinned, host, or sync (the benchmark baseline)")
            ->check(CLI::IsMember({"auto", "pinned", "host", "sync"}))
            ->capture_default_str();
        app.add_option("--device", j.device, "auto (the first GPU, else CPU), cpu, cuda or cuda:N")
            ->capture_default_str();
        add_math_threads_option(app, j.math_threads);
        app.add_option("--epochs", j.epochs, "Passes over the training split")
            ->capture_default_str();
        app.add_option("--batch", j.batch, "Samples (tiles, bags, images) per step")
            ->capture_default_str();
        app.add_option("--last-batch", j.last_batch,
                       "The samples past an epoch's last full batch: keep (a smaller last step) "
                       "or drop")
            ->check(CLI::IsMember({"keep", "drop"}))
            ->capture_default_str();
        app.add_option("--micro-batches", j.micro_batches,
                       "Run each batch's forward and backward in this many parts, one "
                       "optimizer step (docs/train.md#memory-modes)")
            ->capture_default_str();
        app.add_option("--sections", j.sections,
                       "Cut the blocks into this many sections, keeping only their inputs and "
                       "recomputing each in the backward pass (docs/train.md#memory-modes)")
            ->capture_default_str();
        app.add_flag("--offload-boundaries", j.offload_boundaries,
                     "Sections: keep the section inputs in pinned host memory until their "
                     "recompute (CUDA; no effect on the CPU)");
        app.add_option("--lr", j.lr, "Peak learning rate")->capture_default_str();
        app.add_option("--optimizer", j.optimizer, "adamw or sgd (with momentum)")
            ->check(CLI::IsMember({"adamw", "sgd"}))
            ->capture_default_str();
        app.add_option("--weight-decay", j.weight_decay, "Weight decay (not on biases and norms)")
            ->capture_default_str();
        app.add_option("--momentum", j.momentum, "SGD momentum")->capture_default_str();
        app.add_option("--schedule", j.schedule,
                       "cosine (to 0 at the end) or constant, after --warmup")
            ->check(CLI::IsMember({"cosine", "constant"}))
            ->capture_default_str();
        app.add_option("--warmup", j.warmup, "Steps of linear warmup")->capture_default_str();
        app.add_option("--clip-norm", j.clip_norm, "Clip gradients to this global norm (0: off)")
            ->capture_default_str();
        app.add_option("--class-weights", j.class_weights,
                       "Loss weights: none, balanced, or W0,W1,... per label id")
            ->capture_default_str();
        app.add_option("--seed", j.seed, "Seed of the weights, the sampler and dropout")
            ->capture_default_str();
        app.add_option("--train-split", j.train_split, "The split to train on")
            ->capture_default_str();
        app.add_option("--val-split", j.val_split, "The split to validate on after every epoch")
            ->capture_default_str();
        app.add_option("--monitor", j.monitor, "What best.pt and early stopping follow")
            ->check(CLI::IsMember({"val_loss", "val_accuracy", "val_balanced_accuracy", "val_auc"}))
            ->capture_default_str();
        app.add_option("--patience", j.patience,
                       "Stop after this many epochs without improvement (0: never)")
            ->capture_default_str();
        app.add_option("--log-every", j.log_every, "Steps per metrics.jsonl step line")
            ->capture_default_str();
        app.add_option("--checkpoint-every", j.checkpoint_every,
                       "Steps between checkpoints besides epoch ends (0: none)")
            ->capture_default_str();
        app.add_option("--max-steps", j.max_steps,
                       "Stop after this many steps in all, resumably (0: no limit)")
            ->capture_default_str();
        app.add_option("--tiles", j.tiles,
                       "Image datasets: the tile store (default: the one the dataset names)");
        app.add_flag("--resume", j.resume,
                     "Continue the run in the output directory from its last checkpoint");
        app.add_flag("--overwrite", j.overwrite, "Replace an existing run directory");
        app.add_option("--nproc", o->nproc,
                       "Data parallel: train in this many local processes (docs/train.md)");
        app.add_option("--dist-timeout", j.dist_timeout,
                       "Data parallel: seconds a rank waits for the others before failing")
            ->capture_default_str();
        app.add_option("--dist-bucket-mb", j.bucket_mb,
                       "Data parallel: MiB of gradients per all-reduce, launched during backward")
            ->capture_default_str();
        return [o, &common] { return run_train(*o, common); };
      }};
}

}  // namespace mltool::cli
