// The options of `mltool train` (TrainJob and its table), in a header of their own so that the
// pieces of a run (the loop, the task, the run directory, data parallel) see the job without
// the entry point above them (train.hpp). No LibTorch here.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mltool/features/stain_norm.hpp"
#include "mltool/io/dicomweb.hpp"
#include "mltool/io/tile_pixels.hpp"
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
  val_ibs,
  val_auc_mean
};
/// Whether a smaller value of `monitor` is better.
bool lower_is_better(Monitor monitor);
/// The loss (docs/train.md#tasks); auto: the task's default (cross_entropy, mse, cox, bce).
enum class Loss { auto_choice, cross_entropy, mse, huber, cox, nll, bce };
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
  bool no_cuda_graph = false;       ///< CUDA: every step eager, none replayed from a graph
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
  /// Image unit: the transforms of each training sample, in order ("flip", "rot90",
  /// "hed:0.05", "brightness:0.1", ...; train/augment.hpp); empty: none.
  std::vector<std::string> augment;
  /// Image unit: each tile's stain normalised to the reference image's (features/stain.hpp)
  /// before the model, in training and validation alike; none: as the tiles are.
  features::StainNorm stain_norm = features::StainNorm::none;
  std::string stain_reference;
  int threads = 0;  ///< host feed and tile decoding threads; 0 = one per core
  /// LibTorch's intra-op (math) threads on the CPU; 0 = a resumed run's, else LibTorch's
  /// default (OMP_NUM_THREADS, or the cores). The bits of a CPU run depend on it.
  int math_threads = 0;
  util::ProfileRequest profile;  ///< --profile: a trace of a window of steps (rank 0)
  bool resume = false;           ///< continue the run in `output` from checkpoints/last.pt
  bool overwrite = false;        ///< replace an existing run directory
  /// After the run: its validation slides predicted into `output`/validation/ with their
  /// viewer, linked from report.html. Not train's own work: the command does it with
  /// predict::predict_validation once the run has finished.
  bool view = false;
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
  /// The --dicomweb-* options: how a coordinates store's slides given as DICOMweb URLs are read
  /// (by tile_pixels).
  io::DicomwebOptions dicomweb;
  /// Not an option: how an image model's tiles are read (`mltool train` passes
  /// slide::open_tile_pixels(dicomweb), which reads coordinates stores from their slides).
  /// train/ does not read slides itself; a job without it refuses image datasets.
  io::TilePixelOpener tile_pixels;
};

/// The table of TrainJob's options.
const util::Options<TrainJob>& train_options();

}  // namespace mltool::train
