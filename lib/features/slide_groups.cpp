// Grouping a feature store's rows for extract --slide-encoder (slide_groups_internal.hpp).
#include <unordered_map>

#include "h5_interop_internal.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/table.hpp"
#include "mltool/util/error.hpp"
#include "slide_groups_internal.hpp"

namespace mltool::features::detail {
namespace {

// slide → group, from the table.
std::unordered_map<std::string, std::string> read_groups(const SlideEncodeJob& job) {
  const io::Table table = io::read_table(job.group_table);
  const std::size_t slide = table.column("slide"), group = table.column(job.group_column);
  std::unordered_map<std::string, std::string> out;
  for (std::size_t i = 0; i < table.rows.size(); ++i) {
    const auto& row = table.rows[i];
    const std::string where = "line " + std::to_string(table.lines[i]) + ": ";
    if (row[group].empty() || row[group].find('/') != std::string::npos)
      throw InputError(at_file(table.path, where + "group " + io::json_quoted(row[group]) +
                                               " must be non-empty and hold no '/'"));
    const auto [it, added] = out.emplace(row[slide], row[group]);
    if (!added && it->second != row[group])
      throw InputError(at_file(table.path, where + "slide " + io::json_quoted(row[slide]) +
                                               " is in two groups, " + io::json_quoted(it->second) +
                                               " and " + io::json_quoted(row[group])));
  }
  return out;
}

}  // namespace

Plan plan_groups(const SlideEncodeJob& job, const io::FeatureStore& store) {
  Plan plan;
  plan.input_rows = store.rows();
  std::vector<std::string> slides;
  std::unordered_map<std::string, std::vector<std::uint64_t>> rows;
  const auto& invalid = store.invalid_rows();
  std::size_t next_invalid = 0;
  for (std::uint64_t r = 0; r < store.rows(); ++r) {
    const std::string slide = detail::slide_of(store.key(r));
    auto [it, added] = rows.try_emplace(slide);
    if (added) slides.push_back(slide);
    if (next_invalid < invalid.size() && invalid[next_invalid] == r) {
      ++next_invalid;
      ++plan.dropped_invalid;
      continue;
    }
    it->second.push_back(r);
  }
  const auto groups = job.group_table.empty() ? decltype(read_groups(job))() : read_groups(job);
  std::unordered_map<std::string, std::size_t> index;
  for (const auto& slide : slides) {
    std::string id = slide;
    if (!job.group_table.empty()) {
      const auto found = groups.find(slide);
      if (found == groups.end()) {
        if (!job.skip_missing)
          throw UsageError(
              at_file(job.group_table, "does not list slide '" + slide + "' of " + store.dir() +
                                           " (leave such slides out with --skip-missing)"));
        ++plan.skipped_slides;
        continue;
      }
      id = found->second;
    }
    auto [it, added] = index.emplace(id, plan.groups.size());
    if (added) plan.groups.push_back({id, {}, {}});
    plan.groups[it->second].slides.push_back(slide);
    plan.groups[it->second].rows.push_back(std::move(rows[slide]));
  }
  return plan;
}

}  // namespace mltool::features::detail
