// --slide-mpp of the commands that read slides given directly (tile, view), declared once as
// common_options.hpp declares the options several commands share: a command's table names the
// member it binds and says what the value replaces.
#pragma once

#include <optional>
#include <string>

#include "mltool/slide/geometry.hpp"
#include "mltool/util/options.hpp"

namespace mltool::slide {

/// --slide-mpp X: the slides' µm per level-0 pixel instead of their metadata, within
/// [kMinPlausibleMpp, kMaxPlausibleMpp].
template <class Job>
util::Option<Job> slide_mpp_option(std::optional<double> Job::*member, std::string help) {
  return util::custom<Job>(
             "--slide-mpp", "X", std::move(help),
             [member](Job& j, const std::string& text) {
               j.*member = util::parse_real(text, "--slide-mpp");
             },
             [member](const Job& j) {
               return j.*member ? nlohmann::json(*(j.*member)) : nlohmann::json();
             })
      .check(
          [member](const Job& j) {
            const auto& mpp = j.*member;
            return !mpp || (*mpp >= kMinPlausibleMpp && *mpp <= kMaxPlausibleMpp);
          },
          "between " + util::number_text(kMinPlausibleMpp) + " and " +
              util::number_text(kMaxPlausibleMpp) + " µm per pixel");
}

}  // namespace mltool::slide
