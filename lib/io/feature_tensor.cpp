#include "mltool/io/feature_tensor.hpp"

#include <torch/torch.h>

#include "mltool/util/error.hpp"

namespace mltool::io {
namespace {

torch::ScalarType scalar_type(DType dtype, const std::string& dir) {
  switch (dtype) {
    case DType::float32: return torch::kFloat32;
    case DType::float16: return torch::kFloat16;
    default:
      throw FormatError(
          at_file(dir, "feature matrix dtype " + std::string(name(dtype)) + " is not a float"));
  }
}

}  // namespace

torch::Tensor load_feature_tensor(const FeatureStore& store, const torch::Device& device) {
  const auto type = scalar_type(store.dtype(), store.dir());
  const auto rows = static_cast<std::int64_t>(store.rows());
  const auto dims = static_cast<std::int64_t>(store.dims());
  // The deleter owns a reference to the mapping, so the view outlives the store object.
  auto mapping = store.mapping();
  auto view = torch::from_blob(
      const_cast<void*>(store.data()), {rows, dims}, [mapping](void*) mutable { mapping.reset(); },
      torch::TensorOptions().dtype(type));
  if (device.is_cpu()) return view;
  try {
    return view.to(device);
  } catch (const c10::OutOfMemoryError&) {
    throw ResourceError(at_file(store.dir(), "the feature matrix needs " +
                                                 std::to_string(rows * dims * view.element_size()) +
                                                 " bytes on " + device.str() +
                                                 ", which does not have them free"));
  }
}

}  // namespace mltool::io
