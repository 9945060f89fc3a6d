// JPEG tiles decoded on a GPU by nvJPEG (`mltool extract --decode device`): its batched
// decode, on the hardware JPEG decoder where the GPU has one (A100, H100, H200), else
// nvJPEG's hybrid decoder (Huffman decoding on the CPU, IDCT and colour conversion on the GPU),
// straight into device memory. nvJPEG is loaded when first asked for (dlopen), so a machine
// without it, or without a GPU, runs mltool all the same: open() then says why not and the
// caller decodes on the host. No LibTorch here: a CUDA stream is passed as a cudaStream_t.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mltool::cuda {

class JpegDecoder {
 public:
  /// nvJPEG on the calling thread's current CUDA device, or null with `why_not` saying what is
  /// missing: this build has no nvJPEG, its library cannot be loaded, or no decoder could be
  /// created (no GPU, no driver).
  static std::unique_ptr<JpegDecoder> open(std::string& why_not);
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  /// "nvjpeg-hardware" (the GPU's JPEG engines, hybrid for what they refuse) or
  /// "nvjpeg-hybrid", with "-replicated-chroma" where nvJPEG could not upsample chroma with
  /// interpolation as libjpeg-turbo does: what features.json records as the decoder.
  const std::string& backend() const;
  /// nvJPEG's version, "13.0.4".
  const std::string& version() const;

  /// Decodes `jpegs` — complete JPEG streams, each expected to be side × side pixels of three
  /// components — into interleaved RGB in device memory, image i at out + i × side × side × 3,
  /// queued on CUDA stream `stream` (a cudaStream_t) of the current device. Returns for each
  /// image whether it was decoded: one of another size or another number of components, or
  /// that nvJPEG refuses or fails on (a whole batched call then), is left for the caller to
  /// decode another way. The streams' bytes must stay alive until `stream` has done the work.
  std::vector<std::uint8_t> decode(const std::vector<std::string_view>& jpegs, int side,
                                   std::uint8_t* out, void* stream);

  struct Impl;

 private:
  explicit JpegDecoder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mltool::cuda
