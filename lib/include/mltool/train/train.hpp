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

#include "mltool/train/progress.hpp"
#include "mltool/train/run_status.hpp"
#include "mltool/train/train_job.hpp"

namespace mltool::train {

struct TrainReport {
  std::string output;
  RunStatus status = RunStatus::running;  ///< complete, early_stopped, stopped (--max-steps)
  std::string device;                     ///< e.g. "cpu", "cuda:0"
  std::string feed;                       ///< the feed used: pinned, host or sync
  std::string unit;                       ///< tile, bag, image
  std::vector<std::string> blocks;        ///< the model's block names, in order
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
