// A TIFF's JPEG tile as a standalone JPEG file, its compressed bytes untouched. TIFF (tech
// note 2) stores each JPEG tile as an abbreviated stream — SOI, frame, scan, EOI — whose
// quantisation and Huffman tables usually sit once in the directory's JPEGTables tag, and
// says in its Photometric tag whether the three components are YCbCr or R, G, B (Aperio
// often writes RGB). A decoder given the tile alone lacks the tables and guesses the colour
// space from markers the tile does not carry. `mltool tile --passthrough` stores such tiles.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mltool::io {

/// How a TIFF's JPEG tiles code colour (its Photometric tag: 6 YCbCr, 2 RGB).
enum class JpegColour { ycbcr, rgb };

/// "ycbcr" or "rgb".
const char* colour_name(JpegColour colour);

/// `tile` (a TIFF JPEG tile: SOI ... EOI) made standalone: SOI, a marker that fixes the
/// colour space (JFIF APP0 for YCbCr; Adobe APP14 with transform 0 for RGB, so libjpeg,
/// libjpeg-turbo and Pillow take the components as R, G, B without converting, as OpenSlide
/// decodes them), the DQT/DHT/DRI segments of `tables` (the JPEGTables tag, SOI ... EOI; may
/// be empty) and then the tile's own segments and entropy-coded data, byte for byte. JFIF
/// and Adobe segments of the tile or tables are dropped (they would contradict the marker).
/// FormatError "<what>: ..." when either is not a JPEG stream (no SOI, a truncated segment).
std::string standalone_jpeg(std::string_view tile, std::string_view tables, JpegColour colour,
                            const std::string& what);

/// The colour libjpeg-turbo reads the three components of `jpeg` as, from its own markers
/// (jdapimin.c: JFIF, then Adobe's transform, then the component ids), or nothing where it
/// would only default, or where decoders might disagree (both JFIF and Adobe, not three
/// components). FormatError "<what>: ..." when `jpeg` is not a JPEG stream.
std::optional<JpegColour> implied_colour(std::string_view jpeg, const std::string& what);

/// `jpeg` (a whole JPEG file: a DICOM frame) as one that libjpeg, libjpeg-turbo and Pillow
/// decode as `colour` components: `jpeg` itself when its own markers already say so — a JFIF
/// segment for YCbCr, an Adobe segment of transform 0 for RGB or 1 for YCbCr, or with
/// neither the component ids 1, 2, 3 for YCbCr or 'R', 'G', 'B' for RGB (how libjpeg
/// guesses) — else standalone_jpeg(jpeg, "", colour, what). FormatError as standalone_jpeg.
std::string colour_marked_jpeg(std::string jpeg, JpegColour colour, const std::string& what);

}  // namespace mltool::io
