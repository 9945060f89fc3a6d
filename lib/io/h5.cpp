#include "mltool/io/h5.hpp"

#include <hdf5.h>

#include <algorithm>
#include <cstring>
#include <tuple>
#include <utility>

#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::io {
namespace {

// RAII for one hid_t and the function that releases it (H5Dclose, H5Sclose, ...).
class Id {
 public:
  Id() = default;
  Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Id(Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  Id& operator=(Id&& o) noexcept {
    std::swap(id_, o.id_);
    std::swap(close_, o.close_);
    return *this;
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() {
    if (id_ >= 0 && close_) close_(id_);
  }
  hid_t get() const { return id_; }
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }

 private:
  hid_t id_ = H5I_INVALID_HID;
  herr_t (*close_)(hid_t) = nullptr;
};

// HDF5 prints its error stack to stderr unless told not to; mltool reports errors itself.
void quiet_hdf5() {
  static const bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

herr_t collect(unsigned n, const H5E_error2_t* e, void* data) {
  auto& out = *static_cast<std::string*>(data);
  // The innermost entry says what went wrong; the outermost which call failed.
  if (n == 0 && e->desc) out = e->desc;
  if (n > 0 && e->desc && *e->desc) out = std::string(e->desc) + " (" + out + ")";
  return 0;
}

// What HDF5's error stack says about the last failure, then cleared.
std::string hdf5_message() {
  std::string out;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect, &out);
  H5Eclear2(H5E_DEFAULT);
  return out.empty() ? "HDF5 error" : out;
}

template <class E = FormatError>
[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw E(path + ": " + what + ": " + hdf5_message());
}

// The float16 type h5py uses for numpy's float16: IEEE binary16, little-endian.
Id half_type() {
  Id t(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
  H5Tset_fields(t.get(), 15, 10, 5, 0, 10);
  H5Tset_size(t.get(), 2);
  H5Tset_ebias(t.get(), 15);
  return t;
}

// The type of `element` in memory (and in files: little-endian is native here).
Id memory_type(H5Element element) {
  switch (element) {
    case H5Element::float16: return half_type();
    case H5Element::float32: return Id(H5Tcopy(H5T_NATIVE_FLOAT), H5Tclose);
    case H5Element::float64: return Id(H5Tcopy(H5T_NATIVE_DOUBLE), H5Tclose);
    case H5Element::int32: return Id(H5Tcopy(H5T_NATIVE_INT32), H5Tclose);
    case H5Element::int64: return Id(H5Tcopy(H5T_NATIVE_INT64), H5Tclose);
    case H5Element::other: break;
  }
  throw UsageError("H5File: no memory type for 'other'");
}

std::pair<H5Element, std::string> classify(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT) {
    if (size == 2) return {H5Element::float16, "float16"};
    if (size == 4) return {H5Element::float32, "float32"};
    if (size == 8) return {H5Element::float64, "float64"};
    return {H5Element::other, std::to_string(size * 8) + "-bit float"};
  }
  if (cls == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    if (size == 4) return {H5Element::int32, is_signed ? "int32" : "uint32"};
    if (size == 8) return {H5Element::int64, is_signed ? "int64" : "uint64"};
    // Narrower integers read fine as int64; HDF5 converts them.
    return {H5Element::int64, std::string(is_signed ? "int" : "uint") + std::to_string(size * 8)};
  }
  if (cls == H5T_STRING) return {H5Element::other, "string"};
  if (cls == H5T_COMPOUND) return {H5Element::other, "compound"};
  return {H5Element::other, "HDF5 type class " + std::to_string(static_cast<int>(cls))};
}

nlohmann::json read_attribute(const std::string& path, hid_t attr) {
  Id type(H5Aget_type(attr), H5Tclose);
  Id space(H5Aget_space(attr), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (rank > 1 || n < 0) return nullptr;
  const H5T_class_t cls = H5Tget_class(type.get());
  auto shaped = [rank](nlohmann::json values) { return rank == 0 ? values.at(0) : values; };
  if (cls == H5T_INTEGER || cls == H5T_FLOAT) {
    const bool integer = cls == H5T_INTEGER;
    std::vector<std::int64_t> ints(static_cast<std::size_t>(n));
    std::vector<double> reals(static_cast<std::size_t>(n));
    const herr_t rc = integer ? H5Aread(attr, H5T_NATIVE_INT64, ints.data())
                              : H5Aread(attr, H5T_NATIVE_DOUBLE, reals.data());
    if (rc < 0) fail(path, "reading an attribute");
    return shaped(integer ? nlohmann::json(ints) : nlohmann::json(reals));
  }
  if (cls != H5T_STRING || rank != 0) return nullptr;
  if (H5Tis_variable_str(type.get()) > 0) {
    Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    char* text = nullptr;
    if (H5Aread(attr, mem.get(), &text) < 0) fail(path, "reading a string attribute");
    std::string out = text ? text : "";
    H5free_memory(text);
    return out;
  }
  std::string out(H5Tget_size(type.get()), '\0');
  if (H5Aread(attr, type.get(), out.data()) < 0) fail(path, "reading a string attribute");
  out.resize(std::strlen(out.c_str()));
  return out;
}

}  // namespace

const char* name(H5Element element) noexcept {
  switch (element) {
    case H5Element::float16: return "float16";
    case H5Element::float32: return "float32";
    case H5Element::float64: return "float64";
    case H5Element::int32: return "int32";
    case H5Element::int64: return "int64";
    case H5Element::other: break;
  }
  return "other";
}

struct H5File::Handle {
  Id file;
};

H5File::H5File(std::string path, std::unique_ptr<Handle> handle)
    : path_(std::move(path)), handle_(std::move(handle)) {}
H5File::H5File(H5File&&) noexcept = default;
H5File& H5File::operator=(H5File&&) noexcept = default;
H5File::~H5File() = default;

H5File H5File::create(const std::string& path) {
  quiet_hdf5();
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) fail<ResourceError>(path, "cannot create an HDF5 file");
  auto handle = std::make_unique<Handle>();
  handle->file = Id(f, H5Fclose);
  return H5File(path, std::move(handle));
}

H5File H5File::open(const std::string& path) {
  quiet_hdf5();
  if (!util::exists(path)) throw InputError(path + ": cannot open: No such file or directory");
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw FormatError(path + ": not an HDF5 file (no HDF5 signature)");
  }
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) fail(path, "cannot open as HDF5");
  auto handle = std::make_unique<Handle>();
  handle->file = Id(f, H5Fclose);
  return H5File(path, std::move(handle));
}

bool H5File::has_dataset(const std::string& name) const {
  const htri_t link = H5Lexists(handle_->file.get(), name.c_str(), H5P_DEFAULT);
  if (link <= 0) return (H5Eclear2(H5E_DEFAULT), false);
  H5O_info_t info;
  if (H5Oget_info_by_name(handle_->file.get(), name.c_str(), &info, H5P_DEFAULT) < 0)
    fail(path_, "dataset '" + name + "'");
  return info.type == H5O_TYPE_DATASET;
}

H5DatasetInfo H5File::dataset_info(const std::string& name) const {
  if (!has_dataset(name)) throw InputError(path_ + ": no dataset '" + name + "'");
  Id d(H5Dopen2(handle_->file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (d.get() < 0) fail(path_, "dataset '" + name + "'");
  Id type(H5Dget_type(d.get()), H5Tclose);
  Id space(H5Dget_space(d.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail(path_, "dataset '" + name + "': its shape");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  H5DatasetInfo out;
  out.shape.assign(dims.begin(), dims.end());
  std::tie(out.element, out.type_text) = classify(type.get());
  return out;
}

void H5File::create_dataset(const std::string& name, H5Element element, std::uint64_t rows,
                            std::uint64_t cols, std::uint64_t chunk_rows) {
  // Extendible along the rows, as h5py's create_dataset(maxshape=(None, cols)) that CLAM and
  // TRIDENT call, hence chunked (HDF5 requires it of an unlimited dimension).
  const hsize_t dims[2] = {rows, cols};
  const hsize_t max_dims[2] = {H5S_UNLIMITED, cols};
  Id space(H5Screate_simple(2, dims, max_dims), H5Sclose);
  Id plist(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  const hsize_t row_bytes = std::max<hsize_t>(1, cols) * 4;
  if (chunk_rows == 0)  // about 1 MiB of rows, no more rows than there are
    chunk_rows = std::max<hsize_t>(1, std::min<hsize_t>(rows, (1u << 20) / row_bytes));
  const hsize_t chunk[2] = {chunk_rows, std::max<hsize_t>(1, cols)};
  H5Pset_chunk(plist.get(), 2, chunk);
  Id type = memory_type(element);
  Id d(H5Dcreate2(handle_->file.get(), name.c_str(), type.get(), space.get(), H5P_DEFAULT,
                  plist.get(), H5P_DEFAULT),
       H5Dclose);
  if (d.get() < 0) fail<ResourceError>(path_, "creating dataset '" + name + "'");
}

void H5File::write_rows(const std::string& name, std::uint64_t row0, std::uint64_t count,
                        H5Element memory, const void* data) {
  if (count == 0) return;
  Id d(H5Dopen2(handle_->file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (d.get() < 0) fail(path_, "dataset '" + name + "'");
  Id space(H5Dget_space(d.get()), H5Sclose);
  hsize_t dims[2] = {0, 0};
  H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  const hsize_t start[2] = {row0, 0};
  const hsize_t block[2] = {count, dims[1]};
  H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, block, nullptr);
  Id mem(H5Screate_simple(2, block, nullptr), H5Sclose);
  Id type = memory_type(memory);
  if (H5Dwrite(d.get(), type.get(), mem.get(), space.get(), H5P_DEFAULT, data) < 0)
    fail<ResourceError>(path_, "writing rows of dataset '" + name + "'");
}

void H5File::read_rows(const std::string& name, std::uint64_t row0, std::uint64_t count,
                       H5Element memory, void* out) const {
  if (count == 0) return;
  Id d(H5Dopen2(handle_->file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (d.get() < 0) fail(path_, "dataset '" + name + "'");
  Id space(H5Dget_space(d.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  hsize_t dims[2] = {0, 1};
  if (rank < 1 || rank > 2) throw FormatError(path_ + ": dataset '" + name + "' is not 1-D or 2-D");
  H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  const hsize_t start[2] = {row0, 0};
  const hsize_t block[2] = {count, rank == 2 ? dims[1] : 1};
  H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start, nullptr, block, nullptr);
  Id mem(H5Screate_simple(rank, block, nullptr), H5Sclose);
  Id type = memory_type(memory);
  if (H5Dread(d.get(), type.get(), mem.get(), space.get(), H5P_DEFAULT, out) < 0)
    fail(path_, "reading rows " + std::to_string(row0) + " to " + std::to_string(row0 + count) +
                    " of dataset '" + name + "'");
}

nlohmann::json H5File::attributes(const std::string& name) const {
  Id d(H5Dopen2(handle_->file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (d.get() < 0) fail(path_, "dataset '" + name + "'");
  nlohmann::json out = nlohmann::json::object();
  H5O_info_t info;
  if (H5Oget_info(d.get(), &info) < 0) fail(path_, "attributes of '" + name + "'");
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    Id a(H5Aopen_by_idx(d.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, H5P_DEFAULT, H5P_DEFAULT),
         H5Aclose);
    if (a.get() < 0) fail(path_, "attribute " + std::to_string(i) + " of '" + name + "'");
    const ssize_t len = H5Aget_name(a.get(), 0, nullptr);
    std::string attr_name(static_cast<std::size_t>(std::max<ssize_t>(len, 0)) + 1, '\0');
    H5Aget_name(a.get(), attr_name.size(), attr_name.data());
    attr_name.resize(static_cast<std::size_t>(std::max<ssize_t>(len, 0)));
    nlohmann::json value = read_attribute(path_ + ": '" + name + "'", a.get());
    if (!value.is_null()) out[attr_name] = std::move(value);
  }
  return out;
}

namespace {

void write_attribute(const std::string& where, hid_t d, const std::string& key,
                     const nlohmann::json& v) {
  Id type;
  Id space;
  std::vector<std::int64_t> ints;
  std::vector<double> reals;
  std::string text;
  const char* text_pointer = nullptr;
  const void* data = nullptr;
  if (v.is_string()) {
    type = Id(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type.get(), H5T_VARIABLE);
    H5Tset_cset(type.get(), H5T_CSET_UTF8);
    space = Id(H5Screate(H5S_SCALAR), H5Sclose);
    text = v.get<std::string>();
    text_pointer = text.c_str();
    data = &text_pointer;
  } else {
    const nlohmann::json values = v.is_array() ? v : nlohmann::json::array({v});
    bool integer = true;
    for (const auto& x : values) {
      if (!x.is_number()) throw UsageError(where + ": attribute '" + key + "' is not a number");
      integer = integer && x.is_number_integer();
    }
    for (const auto& x : values) {
      ints.push_back(integer ? x.get<std::int64_t>() : 0);
      reals.push_back(x.get<double>());
    }
    const hsize_t n = values.size();
    space = v.is_array() ? Id(H5Screate_simple(1, &n, nullptr), H5Sclose)
                         : Id(H5Screate(H5S_SCALAR), H5Sclose);
    type = Id(H5Tcopy(integer ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE), H5Tclose);
    data = integer ? static_cast<const void*>(ints.data()) : reals.data();
  }
  if (H5Aexists(d, key.c_str()) > 0) H5Adelete(d, key.c_str());
  Id a(H5Acreate2(d, key.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (a.get() < 0 || H5Awrite(a.get(), type.get(), data) < 0)
    fail<ResourceError>(where, "writing attribute '" + key + "'");
}

}  // namespace

void H5File::set_attributes(const std::string& name, const nlohmann::json& attributes) {
  Id d(H5Dopen2(handle_->file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (d.get() < 0) fail(path_, "dataset '" + name + "'");
  for (const auto& [key, value] : attributes.items())
    write_attribute(path_ + ": dataset '" + name + "'", d.get(), key, value);
}

void H5File::close() {
  if (!handle_) return;
  const hid_t f = handle_->file.release();
  handle_.reset();
  if (f >= 0 && H5Fclose(f) < 0) fail<ResourceError>(path_, "closing");
}

}  // namespace mltool::io
