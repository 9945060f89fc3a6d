#include "family.hpp"

#include "mltool/util/error.hpp"

namespace mltool::train::models {

const std::vector<const Family*>& families() {
  static const std::vector<const Family*> table = {&mlp(), &abmil(), &rescnn(), &transmil()};
  return table;
}

const Family& family(const std::string& name) {
  for (const Family* f : families())
    if (name == f->name) return *f;
  throw UsageError("unknown model family '" + name + "'");
}

}  // namespace mltool::train::models
