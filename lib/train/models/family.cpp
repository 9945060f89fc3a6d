#include "family.hpp"

#include "mltool/util/error.hpp"

namespace mltool::train::models {

const std::vector<const Family*>& families() {
  static const std::vector<const Family*> table = {&mlp(),     &abmil(), &rescnn(),  &clam_sb(),
                                                   &clam_mb(), &dsmil(), &transmil()};
  return table;
}

const Family& family(const std::string& name) {
  for (const Family* f : families())
    if (name == f->name) return *f;
  throw UsageError("unknown model family '" + name + "'");
}

std::string refuses(const Family& f, records::PackTask task) {
  if (f.tasks.empty()) return "";
  std::string trains;
  for (const auto t : f.tasks) {
    if (t == task) return "";
    trains += (trains.empty() ? "" : ", ") + std::string(records::to_string(t));
  }
  return "family " + std::string(f.name) + " trains " + trains + " datasets only, not " +
         records::to_string(task) + "; " + f.instead;
}

}  // namespace mltool::train::models
