// The entry point of the LibTorch module (see torch_module.hpp): the factories of its commands
// (their order and their side: kCommandList, cli.hpp).
#include "torch_module.hpp"

#include "mltool/features/segmenter.hpp"
#include "mltool/io/pt_tensor.hpp"
#include "mltool/util/build_info.hpp"

namespace mltool::cli {

Command extract_command();
Command train_command();
Command predict_command();

}  // namespace mltool::cli

extern "C" __attribute__((visibility("default"))) const mltool::cli::TorchModule*
mltool_torch_module() {
  static const mltool::cli::TorchModule module{
      {mltool::cli::extract_command(), mltool::cli::train_command(),
       mltool::cli::predict_command()},
      &mltool::torch_component_versions,
      &mltool::io::encode_pt_tensor,
      &mltool::features::open_segmenter,
  };
  return &module;
}
