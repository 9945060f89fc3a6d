// mltool: whole-slide images to trained models. The one place where errors become exit
// codes (docs/cli.md#exit-codes); everything else throws.
#include <cstdio>
#include <exception>
#include <new>

#include "cli.hpp"
#include "mltool/util/error.hpp"
#include "mltool/util/log.hpp"
#include "mltool/util/stop.hpp"

int main(int argc, char** argv) {
  int code = mltool::exit_code::ok;
  mltool::util::stop_on_sigterm();  // SIGTERM: commit the piece in hand, exit 75
  try {
    code = mltool::cli::run(argc, argv);
  } catch (const mltool::Error& e) {
    mltool::log::error(e.what());
    code = mltool::exit_code_for(e.kind());
  } catch (const std::bad_alloc&) {
    mltool::log::error("out of memory");
    code = mltool::exit_code::runtime;
  } catch (const std::exception& e) {
    mltool::log::error(std::string("internal error: ") + e.what());
    code = mltool::exit_code::runtime;
  }
  // A full disk or a closed pipe shows up only when stdout is flushed: report it.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::perror("mltool: error writing to stdout");
    if (code == mltool::exit_code::ok) code = mltool::exit_code::runtime;
  }
  return code;
}
