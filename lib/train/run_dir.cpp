#include "run_dir.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "mltool/io/manifest.hpp"
#include "mltool/train/train_job.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::train {
namespace {

using json = nlohmann::json;

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) throw ResourceError(sys_message(dir, "cannot list", errno));
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  ::closedir(d);
  return out;
}

}  // namespace

RunDir::RunDir(std::string dir, bool writes) : dir_(std::move(dir)), writes_(writes) {}

RunDir::~RunDir() {
  if (metrics_fd_ >= 0) ::close(metrics_fd_);
}

std::string RunDir::path(const std::string& name) const { return util::join_path(dir_, name); }

std::string RunDir::checkpoint(const std::string& name) const {
  return util::join_path(path("checkpoints"), name);
}

void RunDir::open_metrics(std::uint64_t keep) {
  if (!writes_) return;
  const std::string file = path("metrics.jsonl");
  metrics_fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (metrics_fd_ < 0) throw ResourceError(sys_message(file, "cannot open", errno));
  if (::ftruncate(metrics_fd_, static_cast<off_t>(keep)) != 0)
    throw ResourceError(sys_message(file, "cannot truncate", errno));
  if (::lseek(metrics_fd_, static_cast<off_t>(keep), SEEK_SET) < 0)
    throw ResourceError(sys_message(file, "cannot seek", errno));
  metrics_bytes_ = keep;
}

void RunDir::log(const json& line) {
  if (!writes_) return;
  const std::string text = line.dump() + "\n";
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(metrics_fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw ResourceError(sys_message(path("metrics.jsonl"), "cannot write", errno));
    done += static_cast<std::size_t>(n);
  }
  metrics_bytes_ += text.size();
}

void RunDir::write_manifest(const json& doc) const {
  if (!writes_) return;
  io::write_manifest(path(kRunManifestFile), doc, "train-run");
}

std::optional<json> RunDir::read_manifest() const {
  const std::string file = path(kRunManifestFile);
  if (!util::exists(file)) return std::nullopt;
  return io::read_manifest(file, "train-run");
}

// Only an empty checkpoints/ (or one of partial writes), an empty metrics.jsonl and a
// partial run.json.
bool started_only(const std::string& dir) {
  for (const auto& name : entries(dir)) {
    const std::string path = util::join_path(dir, name);
    if (name == "metrics.jsonl" && !util::is_directory(path) && util::file_size(path) == 0)
      continue;
    if (name.rfind(std::string(kRunManifestFile) + ".partial-", 0) == 0) continue;  // run.json's
    if (name == "checkpoints" && util::is_directory(path)) {
      for (const auto& inner : entries(path))
        if (inner.find(".partial-") == std::string::npos) return false;
      continue;
    }
    return false;
  }
  return true;
}

bool prepare_run_dir(const std::string& dir, bool resume, bool overwrite) {
  if (util::exists(dir) && !util::is_directory(dir))
    throw UsageError(at_file(dir, "exists and is not a directory"));
  const bool has_run = util::exists(util::join_path(dir, kRunManifestFile));
  if (resume) {
    if (!has_run) throw UsageError(at_file(dir, "--resume: there is no run here (no run.json)"));
    util::make_directories(util::join_path(dir, "checkpoints"));
    util::remove_stale_partials(dir);  // the temporaries of a killed run
    util::remove_stale_partials(util::join_path(dir, "checkpoints"));
    return util::exists(util::join_path(util::join_path(dir, "checkpoints"), "last.pt"));
  }
  // What a run killed before its run.json leaves (checkpoints/ without a checkpoint, an
  // empty metrics.jsonl): no run, so the same command starts it again.
  if (!has_run && util::exists(dir) && started_only(dir))
    for (const auto& name : entries(dir)) util::remove_tree(util::join_path(dir, name));
  if (util::exists(dir) && !entries(dir).empty()) {
    if (!overwrite)
      throw UsageError(at_file(
          dir, std::string("exists and is not empty") +
                   (has_run ? "; continue the run with --resume, or replace it with --overwrite"
                            : "; choose a new directory, or replace it with --overwrite")));
    for (const auto& name : entries(dir)) util::remove_tree(util::join_path(dir, name));
  }
  util::make_directories(util::join_path(dir, "checkpoints"));
  return false;
}

namespace {

// --stain-norm: every step so far saw tiles normalised to the run's reference; another
// method or reference file (by its SHA-256) is refused.
void check_same_stain(const json& before, const json& now, const std::string& where) {
  const auto field = [](const json& run, const char* key) {
    const json s = run.value("stain_norm", json());
    return s.is_object() ? s.value(key, std::string()) : std::string();
  };
  const auto what = [&](const json& run) {
    return field(run, "method").empty() ? std::string("none")
                                        : field(run, "method") + " on " + field(run, "reference") +
                                              " (sha256 " + field(run, "sha256") + ")";
  };
  if (field(before, "method") == field(now, "method") &&
      field(before, "sha256") == field(now, "sha256"))
    return;
  throw UsageError(at_file(
      where, "--resume: the run's stain normalisation was " + what(before) + ", now it is " +
                 what(now) +
                 "; resume with the run's --stain-norm and --stain-reference, or start over "
                 "with --overwrite"));
}

}  // namespace

std::vector<std::string> compare_runs(const json& before, const json& now,
                                      const std::string& where) {
  const auto& d0 = before.at("dataset");
  const auto& d1 = now.at("dataset");
  if (const json e0 = d0.value("encoder", json()), e1 = d1.value("encoder", json()); e0 != e1)
    throw UsageError(
        at_file(where, "--resume: the run was trained on features of encoder " +
                           (e0.is_null() ? std::string("(none recorded)") : e0.dump()) +
                           ", the dataset's are of encoder " +
                           (e1.is_null() ? std::string("(none recorded)") : e1.dump()) +
                           "; start a new run"));
  for (const char* key : {"manifest_sha256", "matrix_sha256", "train_split", "val_split"})
    if (d0.at(key) != d1.at(key))
      throw UsageError(at_file(
          where, std::string("--resume: the dataset differs from the run's (") + key + " " +
                     d0.at(key).dump() + " then, " + d1.at(key).dump() + " now); start a new run"));
  if (before.at("spec") != now.at("spec"))
    throw UsageError(
        at_file(where, "--resume: the model spec differs from the run's; start a new run"));
  check_same_stain(before, now, where);
  std::vector<std::string> warnings;
  const auto& o0 = before.at("options");
  const auto& o1 = now.at("options");
  for (const auto& o : train_options()) {  // what may change is declared with the option
    if (o.section != "options" || !o1.contains(o.key())) continue;
    const json& value = o1[o.key()];
    const json old = o0.contains(o.key()) ? o0[o.key()] : o.before_it_existed;
    if (old == value) continue;
    if (o.fixed)
      throw UsageError(at_file(
          where, "--resume: " + o.flag() + " " + value.dump() + " differs from the run's " +
                     old.dump() + " (the sampler position depends on it); start a new run"));
    warnings.push_back(o.flag() + " is now " + value.dump() + " (the run had " + old.dump() +
                       "): the result will differ from an uninterrupted run");
  }
  return warnings;
}

}  // namespace mltool::train
