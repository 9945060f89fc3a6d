// The options of `mltool train`, declared once: the command line (apps/cmd_train.cpp binds
// this table), check_options in train_model, run.json's "options" (what decides the result)
// and "runtime" (what does not), and what --resume may change (compare_runs: a changed
// option is warned about, one fixed_on_resume refused; absent_means is what a run from
// before the option had). docs/train.md's synopsis is checked against it
// (tests/cli/options_docs_test.py).
#include "mltool/features/stain_options.hpp"
#include "mltool/io/dicomweb_options.hpp"
#include "mltool/train/augment.hpp"
#include "mltool/train/train_job.hpp"
#include "mltool/util/common_options.hpp"
#include "mltool/util/math_env.hpp"
#include "mltool/util/shard.hpp"

namespace mltool::train {

const util::EnumNames<FeedKind> kFeeds = {{FeedKind::auto_choice, "auto"},
                                          {FeedKind::pinned, "pinned"},
                                          {FeedKind::host, "host"},
                                          {FeedKind::sync, "sync"}};
const util::EnumNames<Optimizer> kOptimizers = {{Optimizer::adamw, "adamw"},
                                                {Optimizer::sgd, "sgd"}};
const util::EnumNames<Schedule> kSchedules = {{Schedule::cosine, "cosine"},
                                              {Schedule::constant, "constant"}};
const util::EnumNames<Monitor> kMonitors = {
    {Monitor::val_loss, "val_loss"},
    {Monitor::val_accuracy, "val_accuracy"},
    {Monitor::val_balanced_accuracy, "val_balanced_accuracy"},
    {Monitor::val_auc, "val_auc"},
    {Monitor::val_mae, "val_mae"},
    {Monitor::val_rmse, "val_rmse"},
    {Monitor::val_r2, "val_r2"},
    {Monitor::val_pearson, "val_pearson"},
    {Monitor::val_spearman, "val_spearman"},
    {Monitor::val_c_index, "val_c_index"},
    {Monitor::val_ibs, "val_ibs"},
    {Monitor::val_auc_mean, "val_auc_mean"}};
const util::EnumNames<Loss> kLosses = {
    {Loss::auto_choice, "auto"}, {Loss::cross_entropy, "cross_entropy"},
    {Loss::mse, "mse"},          {Loss::huber, "huber"},
    {Loss::cox, "cox"},          {Loss::nll, "nll"},
    {Loss::bce, "bce"}};

bool lower_is_better(Monitor m) {
  return m == Monitor::val_loss || m == Monitor::val_mae || m == Monitor::val_rmse ||
         m == Monitor::val_ibs;
}
const util::EnumNames<LastBatch> kLastBatches = {{LastBatch::keep, "keep"},
                                                 {LastBatch::drop, "drop"}};

namespace {

// What the run predicts and on which samples: the loss and its settings, the folds.
util::Options<TrainJob> task_options() {
  using J = TrainJob;
  using util::choice, util::flag, util::option;
  return {
      choice("--loss", &J::loss, kLosses,
             "auto (the task's default: cross_entropy, mse, cox, bce), cross_entropy, mse, "
             "huber, cox, nll or bce (docs/train.md#tasks)")
          .in("options")
          .absent_means("cross_entropy")
          .fixed_on_resume(),
      option("--huber-delta", &J::huber_delta, "--loss huber: where it turns linear")
          .positive()
          .in("options")
          .absent_means(1.0),
      option("--bins", &J::bins, "--loss nll: time intervals, cut at quantiles of the event times")
          .at_least(2)
          .in("options")
          .absent_means(4)
          .fixed_on_resume(),
      util::custom<J>(
          "--fold", "INT",
          "K-fold datasets: validate on fold I, train on the others (-1: the splits; auto: I "
          "from the job array, SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX)",
          [](J& j, const std::string& text) {
            j.fold = text == "auto" ? static_cast<int>(util::array_index("--fold"))
                                    : static_cast<int>(util::parse_integer(text, "--fold"));
          },
          [](const J& j) { return nlohmann::json(j.fold); })
          .at_least(-1)
          .in("options")
          .absent_means(-1)
          .fixed_on_resume(),
      util::custom<J>(
          "--folds", "all", "K-fold datasets: train every fold into OUTPUT/fold-I, then cv.json",
          [](J& j, const std::string& text) {
            if (text != "all") throw UsageError("--folds: expected 'all', got '" + text + "'");
            j.all_folds = true;
          },
          [](const J& j) { return j.all_folds ? nlohmann::json("all") : nlohmann::json(); }),
      flag("--gather-only", &J::gather_only,
           "--folds all: train nothing; gather the finished folds into cv.json"),
  };
}

// Where the run reads, writes and runs, and how it optimizes.
util::Options<TrainJob> run_options() {
  using J = TrainJob;
  using util::choice, util::flag, util::option;
  return {
      option("dataset", &J::dataset, "The dataset directory (mltool pack)").required(),
      option("--model", &J::spec,
             "The model: a spec, JSON (docs/train.md#model-specs), or a TorchScript module "
             "(docs/train.md#torchscript-models)")
          .required(),
      option("-o,--output", &J::output, "The run directory (created; see --resume, --overwrite)")
          .required(),
      choice("--feed", &J::feed, kFeeds,
             "auto (pinned if it fits), pinned, host, or sync (the benchmark baseline)")
          .in("runtime"),
      util::device_option(&J::device).in("runtime"),
      util::math_threads_option(&J::math_threads).in("runtime"),
      util::profile_option(&J::profile),
      util::profile_skip_option(&J::profile),
      util::profile_steps_option(&J::profile),
      option("--epochs", &J::epochs, "Passes over the training split").at_least(1).in("options"),
      option("--batch", &J::batch, "Samples (tiles, bags, images) per step")
          .at_least(1)
          .in("options")
          .fixed_on_resume(),
      choice("--last-batch", &J::last_batch, kLastBatches,
             "The samples past an epoch's last full batch: keep (a smaller last step) or drop")
          .in("options")
          .absent_means("drop")
          .fixed_on_resume(),
      option("--micro-batches", &J::micro_batches,
             "Run each batch's forward and backward in this many parts, one optimizer step "
             "(docs/train.md#memory-modes)")
          .at_least(1)
          .in("options")
          .absent_means(1),
      option("--sections", &J::sections,
             "Cut the blocks into this many sections, keeping only their inputs and recomputing "
             "each in the backward pass (docs/train.md#memory-modes)")
          .at_least(1)
          .in("options")
          .absent_means(1),
      flag("--offload-boundaries", &J::offload_boundaries,
           "Sections: keep the section inputs in pinned host memory until their recompute "
           "(CUDA; no effect on the CPU)")
          .in("runtime"),
      util::no_oom_retry_option(&J::no_oom_retry).in("runtime"),
      flag("--no-cuda-graph", &J::no_cuda_graph,
           "CUDA: run every step eagerly; by default a step of the batch's shape is captured "
           "once as a CUDA graph and replayed (one process, no --sections or --micro-batches, "
           "AdamW, no --augment; docs/train.md#cuda-graphs)")
          .in("runtime"),
      option("--lr", &J::lr, "Peak learning rate").positive().in("options"),
      choice("--optimizer", &J::optimizer, kOptimizers, "adamw or sgd (with momentum)")
          .in("options"),
      option("--weight-decay", &J::weight_decay, "Weight decay (not on biases and norms)")
          .at_least(0)
          .in("options"),
      option("--momentum", &J::momentum, "SGD momentum").at_least(0).in("options"),
      choice("--schedule", &J::schedule, kSchedules,
             "cosine (to 0 at the end) or constant, after --warmup")
          .in("options"),
      option("--warmup", &J::warmup, "Steps of linear warmup").at_least(0).in("options"),
      option("--clip-norm", &J::clip_norm, "Clip gradients to this global norm (0: off)")
          .at_least(0)
          .in("options"),
      option("--class-weights", &J::class_weights,
             "Loss weights: none, balanced, or W0,W1,... per label id")
          .in("options"),
  };
}

// --augment: a comma list; recorded as its items, each checked as it is parsed.
util::Option<TrainJob> augment_option() {
  return util::custom<TrainJob>(
             "--augment", "LIST",
             "Image datasets: transforms of each training sample, in order, drawn from --seed, the "
             "step and the sample: flip, rot90, hed:SIGMA, brightness:X, contrast:X, saturation:X "
             "(docs/train.md#augmentation); predict and validation never augment",
             [](TrainJob& j, const std::string& text) {
               j.augment.clear();
               for (const auto& item : parse_augment({text})) j.augment.push_back(item.text);
             },
             [](const TrainJob& j) { return nlohmann::json(j.augment); })
      .in("options")
      .absent_means(nlohmann::json::array());
}

}  // namespace

const util::Options<TrainJob>& train_options() {
  using J = TrainJob;
  using util::choice, util::flag, util::option;
  static const util::Options<TrainJob> table = util::joined<J>(
      {run_options(),
       task_options(),
       {
           option("--seed", &J::seed, "Seed of the weights, the sampler and dropout")
               .in("options")
               .fixed_on_resume(),
           option("--train-split", &J::train_split, "The split to train on"),
           option("--val-split", &J::val_split, "The split to validate on after every epoch"),
           choice("--monitor", &J::monitor, kMonitors, "What best.pt and early stopping follow")
               .in("options"),
           option("--bootstrap", &J::bootstrap,
                  "Resamples of the 95% intervals of the final metrics, by patient or slide "
                  "(0: none)")
               .at_least(0),
           option("--patience", &J::patience,
                  "Stop after this many epochs without improvement (0: never)")
               .at_least(0)
               .in("options"),
           option("--log-every", &J::log_every, "Steps per metrics.jsonl step line")
               .at_least(1)
               .in("runtime"),
           option("--checkpoint-every", &J::checkpoint_every,
                  "Steps between checkpoints besides epoch ends (0: none)")
               .at_least(0)
               .in("runtime"),
           option("--max-steps", &J::max_steps,
                  "Stop after this many steps in all, resumably (0: no limit)")
               .at_least(0)
               .in("runtime"),
           option("--tiles", &J::tiles,
                  "Image datasets: the tile store (default: the one the dataset names)"),
       },
       io::dicomweb_options(&J::dicomweb),
       {
           augment_option(),
           features::stain_norm_option(&J::stain_norm, &J::stain_reference)
               .in("options")
               .absent_means("none"),
           features::stain_reference_option(&J::stain_reference),
           flag("--resume", &J::resume,
                "Continue the run in the output directory from its last checkpoint"),
           util::overwrite_option(&J::overwrite),
           flag("--view", &J::view,
                "After training, predict the validation slides into RUN/validation/ with their "
                "offline viewer (predict --view), linked from report.html"),
           option("--dist-timeout", &J::dist_timeout,
                  "Data parallel: seconds a rank waits for the others before failing")
               .at_least(1),
           option("--dist-bucket-mb", &J::bucket_mb,
                  "Data parallel: MiB of gradients per all-reduce, launched during backward")
               .positive()
               .in("runtime"),
       }});
  return table;
}

}  // namespace mltool::train
