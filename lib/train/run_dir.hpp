// The run directory: run.json, metrics.jsonl, checkpoints/. Internal to lib/train.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace mltool::train {

inline constexpr const char* kRunManifestFile = "run.json";
inline constexpr const char* kRunFormat = "mltool.train-run";
inline constexpr int kRunFormatVersion = 1;

class RunDir {
 public:
  /// Uses `dir` as it is (see prepare_run_dir). `writes` false (data parallel ranks other
  /// than 0): open_metrics, log and write_manifest do nothing.
  explicit RunDir(std::string dir, bool writes = true);
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& dir() const { return dir_; }
  bool writes() const { return writes_; }
  std::string path(const std::string& name) const;
  /// checkpoints/NAME.
  std::string checkpoint(const std::string& name) const;

  /// Opens metrics.jsonl for appending, cut to its first `keep` bytes (what the checkpoint
  /// being resumed had seen; 0 for a new run), so a resumed run's lines follow on exactly.
  void open_metrics(std::uint64_t keep);
  /// Appends one line and flushes it.
  void log(const nlohmann::json& line);
  std::uint64_t metrics_bytes() const { return metrics_bytes_; }

  /// run.json, validated against schemas/train-run.schema.json, written atomically.
  void write_manifest(const nlohmann::json& doc) const;
  /// run.json if there is one.
  std::optional<nlohmann::json> read_manifest() const;

  /// Metadata written into every .safetensors export.
  std::map<std::string, std::string> export_metadata;

 private:
  std::string dir_;
  bool writes_ = true;
  int metrics_fd_ = -1;
  std::uint64_t metrics_bytes_ = 0;
};

/// Makes `dir` ready for a run: a new run needs a missing or empty directory (or
/// `overwrite`, which empties it); a resume needs run.json there. UsageError otherwise.
/// Returns true if there is a run to resume (run.json and checkpoints/last.pt).
bool prepare_run_dir(const std::string& dir, bool resume, bool overwrite);

/// Compares a resumed run's settings with the new ones: UsageError naming the first that
/// must not change (dataset, spec, batch, seed, splits); the others return as warnings.
std::vector<std::string> compare_runs(const nlohmann::json& before, const nlohmann::json& now,
                                      const std::string& where);

}  // namespace mltool::train
