#include "mltool/cuda/jpeg_decode.hpp"

#ifdef MLTOOL_HAVE_NVJPEG
#include <dlfcn.h>
#include <nvjpeg.h>

#include <mutex>
#endif

namespace mltool::cuda {

#ifdef MLTOOL_HAVE_NVJPEG
namespace {

// The nvJPEG functions used, found in the library by name.
struct Api {
  decltype(&nvjpegCreateEx) create = nullptr;
  decltype(&nvjpegDestroy) destroy = nullptr;
  decltype(&nvjpegJpegStateCreate) state_create = nullptr;
  decltype(&nvjpegJpegStateDestroy) state_destroy = nullptr;
  decltype(&nvjpegGetImageInfo) image_info = nullptr;
  decltype(&nvjpegDecodeBatchedInitialize) batch_init = nullptr;
  decltype(&nvjpegDecodeBatched) batch_decode = nullptr;
  decltype(&nvjpegJpegStreamCreate) stream_create = nullptr;
  decltype(&nvjpegJpegStreamDestroy) stream_destroy = nullptr;
  decltype(&nvjpegJpegStreamParse) stream_parse = nullptr;
  decltype(&nvjpegDecodeBatchedSupported) batch_supported = nullptr;
  decltype(&nvjpegGetProperty) property = nullptr;
  std::string version;
};

#define MLTOOL_STR2(x) #x
#define MLTOOL_STR(x) MLTOOL_STR2(x)

// nvJPEG's library of the major version compiled against: by its soname first (the loader's
// path, LD_LIBRARY_PATH, the RUNPATH of this library, which a device build points at the
// copy it carries), then where the build found it (the nvidia-nvjpeg wheel of the venv).
void* open_library(std::string& why_not) {
  const char* soname = "libnvjpeg.so." MLTOOL_STR(NVJPEG_VER_MAJOR);
  if (void* lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL)) return lib;
  why_not = std::string("nvJPEG's library ") + soname + " was not found (" + dlerror() + ")";
#ifdef MLTOOL_NVJPEG_LIBRARY
  if (void* lib = dlopen(MLTOOL_NVJPEG_LIBRARY, RTLD_NOW | RTLD_LOCAL)) return lib;
  why_not += ", nor " + std::string(MLTOOL_NVJPEG_LIBRARY);
#endif
  return nullptr;
}

template <class F>
bool bind(void* lib, const char* name, F& f, std::string& why_not) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f) why_not = std::string("nvJPEG's library has no ") + name;
  return f != nullptr;
}

// The library, loaded once for the process; null with `why_not` when it cannot be.
const Api* api(std::string& why_not) {
  static Api loaded;
  static std::string error;
  static bool ok = false;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = open_library(error);
    if (!lib) return;
    Api& a = loaded;
    ok = bind(lib, "nvjpegCreateEx", a.create, error) &&
         bind(lib, "nvjpegDestroy", a.destroy, error) &&
         bind(lib, "nvjpegJpegStateCreate", a.state_create, error) &&
         bind(lib, "nvjpegJpegStateDestroy", a.state_destroy, error) &&
         bind(lib, "nvjpegGetImageInfo", a.image_info, error) &&
         bind(lib, "nvjpegDecodeBatchedInitialize", a.batch_init, error) &&
         bind(lib, "nvjpegDecodeBatched", a.batch_decode, error) &&
         bind(lib, "nvjpegJpegStreamCreate", a.stream_create, error) &&
         bind(lib, "nvjpegJpegStreamDestroy", a.stream_destroy, error) &&
         bind(lib, "nvjpegJpegStreamParse", a.stream_parse, error) &&
         bind(lib, "nvjpegDecodeBatchedSupported", a.batch_supported, error) &&
         bind(lib, "nvjpegGetProperty", a.property, error);
    if (!ok) return;
    int major = 0, minor = 0, patch = 0;
    a.property(MAJOR_VERSION, &major);
    a.property(MINOR_VERSION, &minor);
    a.property(PATCH_LEVEL, &patch);
    a.version = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  });
  if (!ok) why_not = error;
  return ok ? &loaded : nullptr;
}

// One nvJPEG decoder (handle and batched state) of one backend, initialised for the size of
// its last batch.
struct Decoder {
  const Api* api = nullptr;
  nvjpegHandle_t handle = nullptr;
  nvjpegJpegState_t state = nullptr;
  int batch = -1;  // the batch size initialised, -1 after a failure (initialise again)

  bool interpolated = false;  // chroma upsampled as libjpeg-turbo's fancy upsampling does

  // Chroma upsampled with interpolation, as libjpeg-turbo does by default, where the backend
  // can; else replicated (nvJPEG's default).
  Decoder(const Api& a, nvjpegBackend_t backend) : api(&a) {
    interpolated = a.create(backend, nullptr, nullptr, NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION,
                            &handle) == NVJPEG_STATUS_SUCCESS;
    if (!interpolated && a.create(backend, nullptr, nullptr, 0, &handle) != NVJPEG_STATUS_SUCCESS) {
      handle = nullptr;
      return;
    }
    if (a.state_create(handle, &state) != NVJPEG_STATUS_SUCCESS) state = nullptr;
  }
  ~Decoder() {
    if (state) api->state_destroy(state);
    if (handle) api->destroy(handle);
  }
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;
  bool usable() const { return handle && state; }

  // Decodes images `which` of `jpegs` in one batched call; false (nothing decoded, as far as
  // the caller knows) when nvJPEG fails.
  bool run(const std::vector<std::size_t>& which, const std::vector<std::string_view>& jpegs,
           int side, std::uint8_t* out, cudaStream_t stream) {
    if (which.empty()) return true;
    const int n = static_cast<int>(which.size());
    if (batch != n &&
        api->batch_init(handle, state, n, 1, NVJPEG_OUTPUT_RGBI) != NVJPEG_STATUS_SUCCESS) {
      batch = -1;
      return false;
    }
    batch = n;
    std::vector<const unsigned char*> data;
    std::vector<std::size_t> lengths;
    std::vector<nvjpegImage_t> images(which.size());
    const std::size_t tile = static_cast<std::size_t>(side) * side * 3;
    for (std::size_t k = 0; k < which.size(); ++k) {
      data.push_back(reinterpret_cast<const unsigned char*>(jpegs[which[k]].data()));
      lengths.push_back(jpegs[which[k]].size());
      images[k].channel[0] = out + which[k] * tile;
      images[k].pitch[0] = static_cast<std::size_t>(side) * 3;
    }
    if (api->batch_decode(handle, state, data.data(), lengths.data(), images.data(), stream) ==
        NVJPEG_STATUS_SUCCESS)
      return true;
    batch = -1;
    return false;
  }
};

}  // namespace

struct JpegDecoder::Impl {
  const Api* api = nullptr;
  std::unique_ptr<Decoder> hardware;  // the GPU's JPEG engines, where it has them
  std::unique_ptr<Decoder> hybrid;
  nvjpegJpegStream_t parsed = nullptr;  // a stream parsed to ask the hardware decoder
  std::string backend, version;

  ~Impl() {
    if (parsed) api->stream_destroy(parsed);
  }

  // Whether image `jpeg` is side × side with three components.
  bool fits(std::string_view jpeg, int side) const {
    int components = 0;
    nvjpegChromaSubsampling_t subsampling{};
    int widths[NVJPEG_MAX_COMPONENT] = {}, heights[NVJPEG_MAX_COMPONENT] = {};
    const auto* data = reinterpret_cast<const unsigned char*>(jpeg.data());
    return api->image_info(hybrid->handle, data, jpeg.size(), &components, &subsampling, widths,
                           heights) == NVJPEG_STATUS_SUCCESS &&
           components == 3 && widths[0] == side && heights[0] == side;
  }

  // Whether the hardware decoder takes `jpeg` (baseline, one scan, a sampling it knows).
  bool hardware_takes(std::string_view jpeg) const {
    if (!hardware || !parsed) return false;
    int supported = 1;  // 0 means supported
    const auto* data = reinterpret_cast<const unsigned char*>(jpeg.data());
    return api->stream_parse(hardware->handle, data, jpeg.size(), 0, 0, parsed) ==
               NVJPEG_STATUS_SUCCESS &&
           api->batch_supported(hardware->handle, parsed, &supported) == NVJPEG_STATUS_SUCCESS &&
           supported == 0;
  }
};

std::unique_ptr<JpegDecoder> JpegDecoder::open(std::string& why_not) {
  const Api* a = api(why_not);
  if (!a) return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->api = a;
  impl->version = a->version;
  impl->hybrid = std::make_unique<Decoder>(*a, NVJPEG_BACKEND_DEFAULT);
  if (!impl->hybrid->usable()) {
    why_not = "nvJPEG " + a->version + " could not create a decoder (no CUDA device or driver)";
    return nullptr;
  }
  impl->hardware = std::make_unique<Decoder>(*a, NVJPEG_BACKEND_HARDWARE);
  if (!impl->hardware->usable() ||
      a->stream_create(impl->hardware->handle, &impl->parsed) != NVJPEG_STATUS_SUCCESS) {
    impl->hardware.reset();  // this GPU has no JPEG engines
    impl->parsed = nullptr;
  }
  // What decides the pixels: the backend, and whether chroma was interpolated.
  const Decoder& main = impl->hardware ? *impl->hardware : *impl->hybrid;
  impl->backend = std::string(impl->hardware ? "nvjpeg-hardware" : "nvjpeg-hybrid") +
                  (main.interpolated ? "" : "-replicated-chroma");
  return std::unique_ptr<JpegDecoder>(new JpegDecoder(std::move(impl)));
}

std::vector<std::uint8_t> JpegDecoder::decode(const std::vector<std::string_view>& jpegs, int side,
                                              std::uint8_t* out, void* stream) {
  std::vector<std::uint8_t> decoded(jpegs.size(), 0);
  std::vector<std::size_t> on_hardware, on_hybrid;
  for (std::size_t i = 0; i < jpegs.size(); ++i) {
    if (!impl_->fits(jpegs[i], side)) continue;
    (impl_->hardware_takes(jpegs[i]) ? on_hardware : on_hybrid).push_back(i);
  }
  const auto s = static_cast<cudaStream_t>(stream);
  for (auto& [decoder, which] :
       {std::pair{impl_->hardware.get(), &on_hardware}, std::pair{impl_->hybrid.get(), &on_hybrid}})
    if (!which->empty() && decoder->run(*which, jpegs, side, out, s))
      for (const std::size_t i : *which) decoded[i] = 1;
  return decoded;
}

#else  // built without nvJPEG's header: open() says so

struct JpegDecoder::Impl {
  std::string backend, version;
};

std::unique_ptr<JpegDecoder> JpegDecoder::open(std::string& why_not) {
  why_not = "this mltool was built without nvJPEG (no nvjpeg.h at configure time)";
  return nullptr;
}

std::vector<std::uint8_t> JpegDecoder::decode(const std::vector<std::string_view>& jpegs, int,
                                              std::uint8_t*, void*) {
  return std::vector<std::uint8_t>(jpegs.size(), 0);
}

#endif

JpegDecoder::JpegDecoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JpegDecoder::~JpegDecoder() = default;
const std::string& JpegDecoder::backend() const { return impl_->backend; }
const std::string& JpegDecoder::version() const { return impl_->version; }

}  // namespace mltool::cuda
