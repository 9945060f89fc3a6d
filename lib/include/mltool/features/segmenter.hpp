// The LibTorch half of `--tissue MODEL.pt`: a TorchScript segmenter behind slide::Segmenter
// (mltool/slide/segmenter.hpp has the contract and how a slide is read for it).
#pragma once

#include <memory>
#include <string>

#include "mltool/slide/segmenter.hpp"

namespace mltool::features {

/// slide::SegmenterOpener: the TorchScript segmenter `path` on `device` ("auto": the first GPU,
/// else the CPU), its contract read from the archive's mltool.json and checked, and its
/// forward run once on a blank window to check the output's shape. InputError naming the file
/// and what is wrong; ResourceError for a GPU asked for and absent.
std::shared_ptr<slide::Segmenter> open_segmenter(const std::string& path,
                                                 const std::string& device);

}  // namespace mltool::features
