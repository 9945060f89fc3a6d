#include "mltool/records/index_files.hpp"
#include "mltool/util/common_options.hpp"

#include <exception>

#include "mltool/io/tfrecord.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/parallel.hpp"

namespace mltool::records {
namespace {

struct Outcome {
  IndexedFile file;
  std::exception_ptr error;  // set when the file failed
};

Outcome index_one(const std::string& path) {
  Outcome o;
  o.file.path = path;
  try {
    const auto entries = io::build_index(path);
    o.file.index = io::index_path_for(path);
    io::write_index(o.file.index, entries);
    o.file.records = entries.size();
  } catch (const Error& e) {
    o.error = std::current_exception();
    o.file.error = e.what();
  } catch (...) {
    o.error = std::current_exception();
  }
  return o;
}

}  // namespace

const util::Options<IndexJob>& index_options() {
  static const util::Options<IndexJob> table = {
      util::option("shards", &IndexJob::files, "TFRecord files ('-' reads paths from stdin)")
          .required(),
      util::keep_going_option(&IndexJob::keep_going),
  };
  return table;
}

IndexReport index_files(const IndexJob& job) {
  if (job.files.empty()) throw UsageError("no TFRecord files given");
  // Files are independent; results keep the job's order.
  std::vector<Outcome> outcomes(job.files.size());
  util::parallel_for(job.files.size(), job.threads,
                     [&](std::size_t i) { outcomes[i] = index_one(job.files[i]); });
  IndexReport report;
  for (auto& o : outcomes) {
    if (o.error) {
      if (!job.keep_going || o.file.error.empty()) std::rethrow_exception(o.error);
      ++report.failed;
      log::error(o.file.error);
    } else {
      report.records += o.file.records;
      log::info(o.file.path + ": " + std::to_string(o.file.records) + " records -> " +
                o.file.index);
    }
    report.files.push_back(std::move(o.file));
  }
  return report;
}

nlohmann::json to_json(const IndexReport& r) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : r.files)
    files.push_back(
        f.error.empty()
            ? nlohmann::json{{"path", f.path}, {"index", f.index}, {"records", f.records}}
            : nlohmann::json{{"path", f.path}, {"error", f.error}});
  return {{"command", "index"}, {"files", files}, {"records", r.records}, {"failed", r.failed}};
}

}  // namespace mltool::records
