// `mltool train` as a library call: a dataset (mltool pack) and a model spec → a run
// directory. No LibTorch in this header, so the command line compiles without it.
//
//   run/
//     run.json            resolved options, the spec and its blocks, the dataset's checksums,
//                         status and result (schemas/train-run.schema.json)
//     metrics.jsonl       one JSON object per logging step, per epoch, and at the end
//     checkpoints/        last.pt (model, optimizer, RNG, sampler position), best.pt
//     model.safetensors   final weights (safetensors), model.pt the same as a state dict
//                         for torch.load; best.safetensors the best epoch's weights
//     predictions.csv     the final model on the validation split
//
// Feeds (docs/train.md#feeds): `pinned` puts the whole feature matrix (or the decoded tiles)
// on the device once and cuts batches there by index; `host` gathers rows from the memory
// map on worker threads and copies them on a side stream, one batch ahead; `sync` gathers
// and copies each batch on the training thread (the baseline benchmarks compare against).
// Every feed serves the same batches in the same order, so results do not depend on it.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mltool/util/options.hpp"
#include "mltool/util/profile.hpp"

namespace mltool::train {

/// Where batches come from (docs/train.md#feeds); auto: pinned if it fits, else host.
enum class FeedKind { auto_choice, pinned, host, sync };
enum class Optimizer { adamw, sgd };
/// The learning rate after --warmup: cosine (to 0 at the last step) or constant.
enum class Schedule { cosine, constant };
/// What best.pt and early stopping follow; each task offers its own (docs/train.md#tasks).
/// val_loss, val_mae, val_rmse and val_ibs are lower-is-better, the others higher.
enum class Monitor {
  val_loss,
  val_accuracy,
  val_balanced_accuracy,
  val_auc,
  val_mae,
  val_rmse,
  val_r2,
  val_pearson,
  val_spearman,
  val_c_index,
  val_ibs
};
/// Whether a smaller value of `monitor` is better.
bool lower_is_better(Monitor monitor);
/// The loss (docs/train.md#tasks); auto: the task's default (cross_entropy, mse, cox).
enum class Loss { auto_choice, cross_entropy, mse, huber, cox, nll };
/// The samples past an epoch's last full batch: a smaller last step, or left out.
enum class LastBatch { keep, drop };

extern const util::EnumNames<FeedKind> kFeeds;
extern const util::EnumNames<Optimizer> kOptimizers;
extern const util::EnumNames<Schedule> kSchedules;
extern const util::EnumNames<Monitor> kMonitors;
extern const util::EnumNames<LastBatch> kLastBatches;
extern const util::EnumNames<Loss> kLosses;

/// The options of `mltool train`, declared once (lib/train/train_options.cpp): the
/// command line, check_options and run.json's "options" and "runtime" come from it.
struct TrainJob {
  std::string dataset;  ///< dataset directory (mltool pack)
  std::string spec;     ///< model spec JSON (schemas/model.schema.json)
  std::string output;   ///< run directory
  FeedKind feed = FeedKind::auto_choice;
  std::string device = "auto";  ///< auto (cuda:0 if there is a GPU), cpu, cuda, cuda:N
  int epochs = 10;
  int batch = 64;         ///< samples (tiles, bags or images) per step
  int micro_batches = 1;  ///< forward+backward in this many parts per step (memory modes)
  int sections = 1;       ///< blocks in this many sections, recomputed in backward (memory modes)
  /// An out-of-memory error in a step ends the run instead of redoing the step with more
  /// micro-batches (docs/memory-modes.md#out-of-memory).
  bool no_oom_retry = false;
  bool offload_boundaries = false;  ///< sections: keep the section inputs in pinned host memory
  LastBatch last_batch = LastBatch::keep;
  double lr = 1e-3;
  Optimizer optimizer = Optimizer::adamw;
  double weight_decay = 0.01;  ///< on weights of dimension >= 2 only
  double momentum = 0.9;       ///< sgd
  Schedule schedule = Schedule::cosine;
  std::int64_t warmup = 0;             ///< steps of linear warmup
  double clip_norm = 0;                ///< gradient clipping by global norm; 0 = off
  std::string class_weights = "none";  ///< none, balanced, or one weight per label "w0,w1,..."
  Loss loss = Loss::auto_choice;
  double huber_delta = 1.0;  ///< --loss huber: where the loss turns from quadratic to linear
  int bins = 4;              ///< --loss nll: time intervals
  /// K-fold datasets (pack --folds): train on the other folds, validate on fold `fold`; -1:
  /// the --train-split and --val-split.
  int fold = -1;
  bool all_folds = false;    ///< --folds all: every fold into OUTPUT/fold-I, then cv.json
  bool gather_only = false;  ///< --folds all: only gather the finished folds
  std::uint64_t seed = 0;
  std::string train_split = "train";
  std::string val_split = "val";
  Monitor monitor = Monitor::val_loss;
  /// Bootstrap resamples of the 95% intervals of the final validation metrics (run.json's
  /// result.intervals, cv.json's intervals), over patients or slides; 0: none.
  int bootstrap = 1000;
  int patience = 0;             ///< epochs without improvement before stopping; 0 = never
  std::int64_t log_every = 10;  ///< steps between metrics.jsonl step lines
  std::int64_t checkpoint_every =
      0;                       ///< steps between checkpoints (besides each epoch end); 0 = none
  std::int64_t max_steps = 0;  ///< stop after this many steps in all (resumable); 0 = no limit
  std::string tiles;           ///< image unit: the tile store; empty = the dataset's
  int threads = 0;             ///< host feed and tile decoding threads; 0 = one per core
  /// LibTorch's intra-op (math) threads on the CPU; 0 = a resumed run's, else LibTorch's
  /// default (OMP_NUM_THREADS, or the cores). The bits of a CPU run depend on it.
  int math_threads = 0;
  util::ProfileRequest profile;  ///< --profile: a trace of a window of steps (rank 0)
  bool resume = false;           ///< continue the run in `output` from checkpoints/last.pt
  bool overwrite = false;        ///< replace an existing run directory
  // Data parallel (docs/train.md#data-parallel): world_size > 1 joins a c10d group at
  // master_addr:master_port as `rank`; only rank 0 writes the run directory.
  int rank = 0;
  int world_size = 1;
  bool join_group = false;  ///< a group even when world_size is 1 (RANK/WORLD_SIZE were set)
  int local_rank = 0;       ///< the GPU index for --device auto/cuda
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  int dist_timeout = 300;  ///< seconds a collective or the rendezvous may wait
  double bucket_mb = 25;   ///< MiB of gradients per all-reduce bucket
};

/// The table of TrainJob's options.
const util::Options<TrainJob>& train_options();

/// What the progress callback gets: after every step, and after every epoch's validation.
struct TrainProgress {
  bool epoch_end = false;
  int epoch = 0;  ///< 1-based
  int epochs = 0;
  std::int64_t step = 0;  ///< steps done in all
  std::int64_t total_steps = 0;
  std::int64_t epoch_step = 0;  ///< steps done in this epoch
  std::int64_t steps_per_epoch = 0;
  double lr = 0;
  double loss = 0;            ///< step: the last logged mean loss; epoch end: the epoch's mean
  nlohmann::json validation;  ///< epoch end: val_loss, val_accuracy, ... (null otherwise)
  bool improved = false;      ///< epoch end: the monitored value improved (best.pt written)
};

struct TrainReport {
  std::string output;
  std::string status;               ///< complete, early_stopped, stopped (--max-steps)
  std::string device;               ///< e.g. "cpu", "cuda:0"
  std::string feed;                 ///< the feed used: pinned, host or sync
  std::string unit;                 ///< tile, bag, image
  std::vector<std::string> blocks;  ///< the model's block names, in order
  std::int64_t parameters = 0;
  std::int64_t steps = 0;         ///< steps done in all
  std::int64_t resumed_from = 0;  ///< the step a --resume continued from (0: a new run)
  int epochs_done = 0;
  int best_epoch = 0;     ///< 0 if no epoch finished
  double best_value = 0;  ///< of `monitor` at best_epoch
  std::string monitor;
  nlohmann::json validation;  ///< the final model's validation metrics
  double seconds = 0;
  double samples_per_second = 0;  ///< training samples per second of this run's steps
  /// Memory modes: "plain", "micro_batches" or "sections"; the block names of each section
  /// (one section of all blocks unless --sections); the largest step's tracked activation
  /// bytes (docs/train.md#memory-modes); on CUDA the caching allocator's peak of allocated
  /// bytes during the steps (-1 on the CPU).
  std::string memory_mode = "plain";
  int micro_batches = 1;
  std::vector<std::vector<std::string>> sections;
  std::int64_t activation_bytes = 0;
  std::int64_t device_peak_bytes = -1;
  /// Data parallel: gradient buckets, and how many all-reduces were launched during backward
  /// (over all steps; the others by the step's end) — 0 and 0 in one process.
  std::int64_t dist_buckets = 0;
  std::int64_t dist_launched_in_backward = 0;
};

/// The summary `mltool train --json` prints.
nlohmann::json to_json(const TrainReport& report);

/// Trains (see the layout above). Throws UsageError for bad options, an existing run without
/// --resume/--overwrite, or options that differ from the run being resumed; InputError for a
/// missing or empty split, a spec whose input_dims or classes differ from the dataset, an
/// image dataset without a tile store; FormatError for a spec or dataset that does not
/// validate (naming the file and JSON pointer, or the shard and record); ResourceError for a
/// pinned feed that does not fit, or a loss that became NaN or infinite (the last good
/// checkpoint is kept, naming its step).
TrainReport train_model(const TrainJob& job,
                        const std::function<void(const TrainProgress&)>& progress = {});

}  // namespace mltool::train
