// The first of the phases every command that writes an output goes through — check, lock,
// empty (--overwrite), work (docs/cli.md#overwrite): what the command reads is checked before
// the output is locked and emptied, so that a typo never costs the output.
#pragma once

#include <string>

namespace mltool::util {

/// That `path`, which the command will read, is there. InputError (exit 2)
/// "PATH: no such file or directory (GIVEN_AS)" otherwise; `given_as` says where the path came
/// from ("--model", "a slide of the list").
void require_input(const std::string& path, const std::string& given_as);

}  // namespace mltool::util
