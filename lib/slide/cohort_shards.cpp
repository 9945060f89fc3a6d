#include "cohort_shards.hpp"

#include <map>

#include <nlohmann/json.hpp>

#include "mltool/io/dicomweb.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"

namespace mltool::slide {
namespace {

constexpr const char* kShardKey = "shard";

std::vector<std::string> ids_of(const std::vector<std::string>& slides) {
  std::vector<std::string> ids;
  for (const auto& path : slides) {
    try {
      ids.push_back(io::slide_id_for(path));
    } catch (const Error&) {
      ids.push_back(io::redacted_url(path));  // no id: fails when tiled; listed as given
    }
  }
  return ids;
}

nlohmann::json record(const util::Shard& part, const std::vector<std::string>& slides,
                      bool finished, const std::vector<std::string>& failed,
                      const std::vector<std::string>& incomplete) {
  return {{"index", part.index},  {"count", part.count}, {"slides", ids_of(slides)},
          {"finished", finished}, {"failed", failed},    {"incomplete", incomplete}};
}

// The I/N a store's record holds; FormatError naming the store if it is malformed.
util::Shard recorded_part(const nlohmann::json& r, const std::string& store) {
  const auto bad = [&] {
    return FormatError(at_file(store, "meta 'shard' is not {index, count, slides, finished}"));
  };
  if (!r.is_object() || !r.contains("index") || !r.contains("count") ||
      !r["index"].is_number_unsigned() || !r["count"].is_number_unsigned())
    throw bad();
  util::Shard part{r["index"].get<std::size_t>(), r["count"].get<std::size_t>()};
  if (part.count == 0 || part.index >= part.count) throw bad();
  return part;
}

std::string list_text(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

void adopt_shard(io::TileStore& store, const util::Shard& part,
                 const std::vector<std::string>& slides) {
  if (const auto before = store.store_record(kShardKey)) {
    const util::Shard was = recorded_part(*before, store.path());
    if (was.index != part.index || was.count != part.count)
      throw UsageError(
          at_file(store.path(),
                  "holds shard " + was.text() + " of a `tile --shard` run; this run is " +
                      (part.whole() ? std::string("the whole list") : "shard " + part.text()) +
                      ": give --shard " + was.text() + " (or --shard auto --shards " +
                      std::to_string(was.count) +
                      ") to resume it, another -o, or --overwrite to replace it"));
  }
  if (part.whole()) return;
  store.adopt_record(kShardKey, record(part, slides, false, {}, {}).dump());
}

void finish_shard(io::TileStore& store, const util::Shard& part,
                  const std::vector<std::string>& slides, const std::vector<std::string>& failed,
                  const std::vector<std::string>& incomplete) {
  if (part.whole()) return;
  const std::string text = record(part, slides, true, failed, incomplete).dump();
  store.adopt_record(kShardKey, text);
  store.put_store_record(kShardKey, text);
}

void check_shards(const std::vector<std::string>& inputs, bool allow_partial) {
  std::map<std::size_t, std::string> by_index;
  std::size_t count = 0;
  std::string count_from;
  std::vector<std::string> problems;
  for (const auto& path : inputs) {
    const auto store = io::TileStore::open(path, false);
    const auto r = store.store_record(kShardKey);
    if (!r) continue;
    const util::Shard part = recorded_part(*r, path);
    if (count != 0 && part.count != count)
      throw UsageError(at_file(path, "holds shard " + part.text() + ", but " + count_from +
                                         " is one of " + std::to_string(count) +
                                         ": give the stores of one `tile --shard I/N` run"));
    count = part.count;
    count_from = path;
    if (const auto [at, fresh] = by_index.emplace(part.index, path); !fresh)
      throw UsageError(at_file(path, "holds shard " + part.text() + ", as " + at->second +
                                         " does: give each shard's store once"));
    if (!r->value("finished", false))
      problems.push_back("shard " + part.text() + " (" + path +
                         ") is unfinished: run its `tile --shard " + part.text() +
                         "` again (it resumes)");
    else if (const auto failed = r->value("failed", std::vector<std::string>()); !failed.empty())
      log::warn(path + ": shard " + part.text() + " finished with failed slide(s) " +
                list_text(failed) + ": they are not in the merge");
    if (const auto partial = r->value("incomplete", std::vector<std::string>()); !partial.empty())
      log::warn(path + ": shard " + part.text() + " finished with incomplete slide(s) " +
                list_text(partial) + " (tiles failed): merged as they are; tile them into the " +
                "merged store again to fetch their failed tiles");
  }
  std::vector<std::string> missing;
  for (std::size_t i = 0; i < count; ++i)
    if (!by_index.count(i)) missing.push_back(util::Shard{i, count}.text());
  if (!missing.empty())
    problems.insert(problems.begin(), "shard(s) " + list_text(missing) + " of " +
                                          std::to_string(count) +
                                          " missing: give the store of every `tile --shard I/" +
                                          std::to_string(count) + "` task");
  if (problems.empty()) return;
  std::string text = "--merge:";
  for (const auto& p : problems) text += " " + p + ";";
  text.pop_back();
  if (!allow_partial) throw UsageError(text + " (or merge what is there with --allow-partial)");
  log::warn(text + "; merging what is there (--allow-partial)");
}

bool finished_without_slides(const std::string& path) {
  const auto store = io::TileStore::open(path, false);
  const auto r = store.store_record(kShardKey);
  return r && r->value("finished", false) && store.completed_slides().empty();
}

}  // namespace mltool::slide
