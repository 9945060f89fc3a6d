// libFuzzer target, differential: arbitrary bytes as one serialized tf.train.Example, read by
// both parse_example (protobuf, io/example.cpp) and ExampleScanner (io/example_scan.cpp), whose
// header promises it accepts exactly what parse_example accepts, with the same values under
// protobuf's merge rules. The oracle (any breach aborts):
//   - parse_example either returns or throws mltool::FormatError (anything else escapes);
//   - the scanner accepts iff parse_example accepts; a refusal sets a non-empty error();
//   - on acceptance, asked for every name parse_example found (plus a few fixed ones), the
//     scanner reports the same presence, kind and values (floats compared bit for bit) and
//     no other features;
//   - a scanner reused on a prefix of the input and then on the input again (its per-entry
//     slot hints are then stale) still agrees.
// The wording of the two readers' messages is not compared: which of several problems a
// reader reports first is not part of the contract.
//
// Seeds: fuzz/seeds/fuzz_example (made by hand on the wire: pack-style records, floats,
// bags, bytes lists, a repeated name, a kind-less feature, a UTF-8 name, two Features).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.hpp"
#include "mltool/io/example.hpp"
#include "mltool/io/example_scan.hpp"
#include "mltool/util/error.hpp"

const char* const kFuzzTarget = "fuzz_example";

namespace {

using mltool::io::Example;
using mltool::io::ExampleScanner;
using mltool::io::FeatureKind;

// Names asked of the scanner besides those protobuf found: the ones pack writes, the empty
// name (an entry without a key) and a short one the fuzzer can hit.
const std::vector<std::string>& fixed_names() {
  static const std::vector<std::string> names = {"label", "index", "slide", "", "a"};
  return names;
}

std::optional<Example> by_protobuf(std::string_view bytes) {
  try {
    return mltool::io::parse_example(bytes, "");
  } catch (const mltool::FormatError&) {
    return std::nullopt;
  }
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// The scanner (already run on `bytes`, with result `accepted`) against protobuf's reading.
void compare(const std::optional<Example>& truth, ExampleScanner& scanner, bool accepted,
             std::string_view bytes) {
  if (truth.has_value() != accepted) {
    finding(accepted ? "scanner accepted what parse_example refuses"
                     : "scanner refused what parse_example accepts:",
            scanner.error());
  }
  if (!accepted) {
    if (scanner.error().empty()) finding("scanner refused without an error message");
    return;
  }
  std::size_t found = 0;
  for (std::size_t i = 0; i < scanner.size(); ++i) {
    const std::string& name = scanner.name(i);
    if (truth->has(name) != scanner.has(i)) finding("presence differs for", name);
    if (!scanner.has(i)) {
      if (scanner.kind(i) != FeatureKind::none || !scanner.int64s(i).empty() ||
          !scanner.floats(i).empty() || !scanner.bytes(i).empty())
        finding("absent feature has values:", name);
      continue;
    }
    ++found;
    const FeatureKind kind = truth->kind(name);
    if (scanner.kind(i) != kind) finding("kind differs for", name);
    if (scanner.int64s(i) !=
        (kind == FeatureKind::int64_list ? truth->int64s(name) : std::vector<std::int64_t>{}))
      finding("int64 values differ for", name);
    if (!same_floats(scanner.floats(i),
                     kind == FeatureKind::float_list ? truth->floats(name) : std::vector<float>{}))
      finding("float values differ for", name);
    const std::vector<std::string> empty;
    const std::vector<std::string>& strings =
        kind == FeatureKind::bytes_list ? truth->bytes(name) : empty;
    const auto& views = scanner.bytes(i);
    if (views.size() != strings.size()) finding("bytes value count differs for", name);
    for (std::size_t j = 0; j < views.size(); ++j) {
      if (views[j] != strings[j]) finding("bytes value differs for", name);
      // Views point into the scanned record.
      if (!views[j].empty() && (views[j].data() < bytes.data() ||
                                views[j].data() + views[j].size() > bytes.data() + bytes.size()))
        finding("bytes view outside the record for", name);
    }
  }
  if (found != truth->size()) finding("scanner found a different number of features");
  if (scanner.other_features() != 0 || !scanner.first_other().empty())
    finding("scanner reports unrequested features although every name was requested");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::optional<Example> truth = by_protobuf(bytes);

  std::vector<std::string> names = fixed_names();
  if (truth) {
    for (const std::string& name : truth->names())
      if (name != "label" && name != "index" && name != "slide" && !name.empty() && name != "a")
        names.push_back(name);
  }
  ExampleScanner scanner(names);
  compare(truth, scanner, scanner.scan(bytes), bytes);

  // Reuse: a prefix (usually a damaged record), then the whole input again.
  const std::string_view prefix = bytes.substr(0, size / 2);
  const std::optional<Example> prefix_truth = by_protobuf(prefix);
  const bool prefix_accepted = scanner.scan(prefix);
  if (prefix_truth.has_value() != prefix_accepted)
    finding(prefix_accepted ? "reused scanner accepted a prefix parse_example refuses"
                            : "reused scanner refused a prefix parse_example accepts:",
            scanner.error());
  compare(truth, scanner, scanner.scan(bytes), bytes);
  return 0;
}
