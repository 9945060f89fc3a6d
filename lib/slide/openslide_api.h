// The part of OpenSlide 4's C API that mltool calls (not a public header). mltool links the
// OpenSlide project's own build (the openslide-bin wheel's libopenslide.so.1, 4.0.x, its
// dependencies linked in and hidden), not Debian's 3.4.1, whose header and library
// (libopenslide.so.0) Debian's libvips pulls in: these declarations follow OpenSlide 4.0's
// openslide.h, so nothing of 3.4 is compiled in. The signatures are those of
// https://openslide.org/api/openslide_8h.html (4.0.0).
#pragma once

#include <cstdint>

extern "C" {

typedef struct _openslide openslide_t;

const char* openslide_detect_vendor(const char* filename);
openslide_t* openslide_open(const char* filename);
int32_t openslide_get_level_count(openslide_t* osr);
void openslide_get_level_dimensions(openslide_t* osr, int32_t level, int64_t* w, int64_t* h);
double openslide_get_level_downsample(openslide_t* osr, int32_t level);
void openslide_read_region(openslide_t* osr, uint32_t* dest, int64_t x, int64_t y, int32_t level,
                           int64_t w, int64_t h);
void openslide_close(openslide_t* osr);
const char* openslide_get_error(openslide_t* osr);
const char* const* openslide_get_property_names(openslide_t* osr);
const char* openslide_get_property_value(openslide_t* osr, const char* name);
const char* openslide_get_version(void);
const char* const* openslide_get_associated_image_names(openslide_t* osr);
void openslide_get_associated_image_dimensions(openslide_t* osr, const char* name, int64_t* w,
                                               int64_t* h);

}  // extern "C"

// Property names (openslide.h's OPENSLIDE_PROPERTY_NAME_*).
inline constexpr const char* kOpenSlideMppX = "openslide.mpp-x";
inline constexpr const char* kOpenSlideMppY = "openslide.mpp-y";
inline constexpr const char* kOpenSlideObjectivePower = "openslide.objective-power";
inline constexpr const char* kOpenSlideQuickhash = "openslide.quickhash-1";
