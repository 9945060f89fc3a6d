# Finds every dependency once, so lib/, apps/, tests/ and bench/ only link targets.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Protobuf REQUIRED)
pkg_check_modules(LMDB REQUIRED IMPORTED_TARGET lmdb)

if(MLTOOL_BUILD_APPS)
  find_package(CLI11 REQUIRED)
endif()
if(MLTOOL_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(MLTOOL_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

# Tile codecs, always: extract decodes tiles without OpenSlide or libvips.
pkg_check_modules(TURBOJPEG REQUIRED IMPORTED_TARGET libturbojpeg)
find_package(PNG REQUIRED)
# CLAM/TRIDENT interchange (export/import h5): the HDF5 C library, Debian's libhdf5-dev.
find_package(HDF5 REQUIRED COMPONENTS C)

if(MLTOOL_WITH_SLIDE)
  # OpenSlide 4 (DICOM WSI among its formats) from the OpenSlide project's openslide-bin
  # wheel, which scripts/setup.sh installs in the venv: libopenslide.so.1 with its
  # dependencies linked in and only openslide_* exported. Not Debian's libopenslide-dev
  # (3.4.1, libopenslide.so.0), which Debian's libvips loads for its own openslideload:
  # mltool never calls that loader, and libopenslide.so.1, a direct dependency of
  # libmltool_core, comes first in the process's symbol lookup (lib/slide/openslide_api.h).
  if(NOT MLTOOL_OPENSLIDE_LIBRARY)
    find_package(Python3 REQUIRED COMPONENTS Interpreter)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -c
              "import openslide_bin, os; print(os.path.join(os.path.dirname(openslide_bin.__file__), 'libopenslide.so.1'))"
      OUTPUT_VARIABLE _mltool_openslide OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0 OR NOT EXISTS "${_mltool_openslide}")
      message(FATAL_ERROR "OpenSlide 4: no openslide-bin in ${Python3_EXECUTABLE}'s packages; "
                          "run scripts/setup.sh or pass -DMLTOOL_OPENSLIDE_LIBRARY=/path/libopenslide.so.1")
    endif()
    set(MLTOOL_OPENSLIDE_LIBRARY "${_mltool_openslide}" CACHE FILEPATH "OpenSlide 4 library")
  endif()
  add_library(mltool_openslide SHARED IMPORTED)
  set_target_properties(mltool_openslide PROPERTIES IMPORTED_LOCATION "${MLTOOL_OPENSLIDE_LIBRARY}"
                                                    IMPORTED_SONAME libopenslide.so.1)
  pkg_check_modules(VIPS REQUIRED IMPORTED_TARGET vips)
  # libtiff reads a level's JPEG tiles as they are stored (tile --passthrough); 4.5 for
  # TIFFOpenExt's per-handle message handlers.
  pkg_check_modules(TIFF REQUIRED IMPORTED_TARGET libtiff-4>=4.5)
  # Slides over DICOMweb (io/dicomweb.cpp): Debian's libcurl4-openssl-dev.
  pkg_check_modules(CURL REQUIRED IMPORTED_TARGET libcurl)
  # tile --roi's regions (slide/roi.cpp): GEOS's C API, Debian's libgeos-dev (3.11:
  # GEOSGeom_createRectangle_r). geos-config first (what GEOS installs), then pkg-config (geos.pc
  # since 3.10), then the library and header themselves.
  if(NOT TARGET mltool_geos)
    find_program(MLTOOL_GEOS_CONFIG geos-config)
    set(_geos_hints "")
    set(_geos_inc "")
    if(MLTOOL_GEOS_CONFIG)
      execute_process(COMMAND "${MLTOOL_GEOS_CONFIG}" --prefix OUTPUT_VARIABLE _geos_prefix
                      OUTPUT_STRIP_TRAILING_WHITESPACE)
      execute_process(COMMAND "${MLTOOL_GEOS_CONFIG}" --includes OUTPUT_VARIABLE _geos_inc
                      OUTPUT_STRIP_TRAILING_WHITESPACE)
      list(APPEND _geos_hints "${_geos_prefix}/lib" "${_geos_prefix}/lib64")
    else()
      pkg_check_modules(GEOS QUIET geos>=3.11)
      if(GEOS_FOUND)
        list(APPEND _geos_hints ${GEOS_LIBRARY_DIRS})
        set(_geos_inc "${GEOS_INCLUDE_DIRS}")
      endif()
    endif()
    find_library(MLTOOL_GEOS_LIBRARY NAMES geos_c HINTS ${_geos_hints})
    find_path(MLTOOL_GEOS_INCLUDE_DIR geos_c.h HINTS ${_geos_inc})
    if(NOT MLTOOL_GEOS_LIBRARY OR NOT MLTOOL_GEOS_INCLUDE_DIR)
      message(FATAL_ERROR "GEOS (its C API, libgeos_c and geos_c.h) not found: apt-get install "
                          "libgeos-dev (scripts/setup.sh does)")
    endif()
    add_library(mltool_geos INTERFACE IMPORTED)
    set_target_properties(mltool_geos PROPERTIES
      INTERFACE_LINK_LIBRARIES "${MLTOOL_GEOS_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${MLTOOL_GEOS_INCLUDE_DIR}")
  endif()
endif()

# CUDA: compiled when nvcc exists, whether or not this machine has a GPU. sm_90 SASS plus
# compute_90 PTX, so Hopper runs the SASS and later GPUs JIT the PTX.
set(MLTOOL_HAVE_CUDA OFF)
if(MLTOOL_WITH_CUDA AND MLTOOL_WITH_TORCH)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90-real 90-virtual)
    endif()
    # Share libtorch's CUDA runtime instead of linking a second, static one.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    set(MLTOOL_HAVE_CUDA ON)
  endif()
endif()

# nvJPEG (extract --decode device): its header at build time, from the CUDA toolkit or, where
# the toolkit has none (one assembled from PyPI), from the nvidia-nvjpeg wheel that
# scripts/setup.sh installs in the venv; its library is loaded at run time (lib/cuda/
# jpeg_decode.cpp), so where it is missing extract decodes on the host.
set(MLTOOL_HAVE_NVJPEG OFF)
if(MLTOOL_HAVE_CUDA)
  find_package(Python3 COMPONENTS Interpreter)
  set(_mltool_nvjpeg_hints)
  if(Python3_EXECUTABLE)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -c
              "import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], 'cu13'))"
      OUTPUT_VARIABLE _mltool_nvidia OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_mltool_nvidia)
      set(_mltool_nvjpeg_hints "${_mltool_nvidia}")
    endif()
  endif()
  get_filename_component(_mltool_cuda_root "${CMAKE_CUDA_COMPILER}" DIRECTORY)
  find_path(MLTOOL_NVJPEG_INCLUDE_DIR nvjpeg.h
            HINTS "${_mltool_cuda_root}/../include" ${_mltool_nvjpeg_hints}
            PATH_SUFFIXES include NO_DEFAULT_PATH)
  find_file(MLTOOL_NVJPEG_LIBRARY NAMES libnvjpeg.so.13
            HINTS "${_mltool_cuda_root}/../lib64" "${_mltool_cuda_root}/../lib" ${_mltool_nvjpeg_hints}
            PATH_SUFFIXES lib NO_DEFAULT_PATH)
  if(MLTOOL_NVJPEG_INCLUDE_DIR)
    set(MLTOOL_HAVE_NVJPEG ON)
  endif()
  message(STATUS "nvJPEG: header ${MLTOOL_NVJPEG_INCLUDE_DIR}, library ${MLTOOL_NVJPEG_LIBRARY}")
endif()

if(MLTOOL_WITH_TORCH)
  # LibTorch from the PyPI wheel: scripts/setup.sh passes torch.utils.cmake_prefix_path.
  # Torch's config warns about optional pieces (kineto, nvtx) we do not use.
  # Torch's config appends its own -gencode list to CMAKE_CUDA_FLAGS; mltool's kernels use
  # CMAKE_CUDA_ARCHITECTURES instead, so keep our flags as they were.
  set(TORCH_CUDA_ARCH_LIST "9.0+PTX")
  # It also sets CMAKE_CUDA_ARCHITECTURES to OFF: restore both.
  set(_mltool_cuda_flags "${CMAKE_CUDA_FLAGS}")
  set(_mltool_cuda_archs "${CMAKE_CUDA_ARCHITECTURES}")
  find_package(Torch REQUIRED)
  set(CMAKE_CUDA_FLAGS "${_mltool_cuda_flags}")
  if(MLTOOL_HAVE_CUDA)
    set(CMAKE_CUDA_ARCHITECTURES "${_mltool_cuda_archs}")
  endif()
  message(STATUS "LibTorch ${Torch_VERSION} (CUDA in mltool kernels: ${MLTOOL_HAVE_CUDA})")
endif()
