// Grouping a feature store's rows for extract --slide-encoder (slide_groups_internal.hpp).
#include <unordered_map>

#include "h5_interop_internal.hpp"
#include "mltool/io/feature_store.hpp"
#include "mltool/io/table.hpp"
#include "mltool/util/error.hpp"
#include "slide_groups_internal.hpp"

namespace mltool::features::detail {

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
  const auto groups = job.group_table.empty()
                          ? std::unordered_map<std::string, std::string>()
                          : io::read_slide_groups(job.group_table, job.group_column);
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
