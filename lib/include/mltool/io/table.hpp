// Tables of text: a CSV, TSV or JSONL file read into named columns and rows of strings, with
// the line each row came from. The one reader of such files (labels tables for pack; any
// other table a command takes), in lib/io because nothing in it is about labels.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mltool::io {

enum class TableFormat { csv, tsv, jsonl };

/// The format of a table file from its extension, case-insensitively: .csv, .tsv,
/// .jsonl. Throws InputError naming the path for any other extension.
TableFormat table_format_for(const std::string& path);

/// A table as read: column names and rows of text, every row as wide as the header.
struct Table {
  std::string path;                            ///< the file, for messages
  std::vector<std::string> columns;            ///< distinct, non-empty
  std::vector<std::vector<std::string>> rows;  ///< rows[i][c] is column c of row i
  std::vector<std::uint64_t> lines;            ///< 1-based line on which row i starts

  /// Index of column `name`; InputError "PATH: no column "x" (the columns are: a, b)".
  std::size_t column(const std::string& name) const;
};

/// Parses the text of a table; `path` only names the file in messages. Common to all
/// formats: a UTF-8 byte-order mark at the start is skipped; lines end in LF or CRLF;
/// empty lines are skipped wherever they are (so a blank trailing line is harmless);
/// at least a header is required (an empty file is a FormatError); the header's
/// names must be non-empty and distinct.
/// - csv: RFC 4180. A field that starts with '"' is quoted: it runs to the next lone
///   '"', may hold commas, line breaks (kept as they are) and '""' (one quote), and
///   must be followed by a comma or the end of the line. A quote inside an unquoted
///   field, text after a closing quote, an unterminated quote and a lone CR are errors.
///   Every row must have as many fields as the header.
/// - tsv: fields separated by tabs; no quoting (quotes are ordinary characters), so a
///   field cannot hold a tab or a line break. Every row as wide as the header.
/// - jsonl: one JSON object per line. The columns are the objects' member names in
///   order of first appearance; a value is a string, an integer (written in decimal),
///   a fractional number (the shortest text that reads back as the same double, e.g.
///   "12.5", "1e-07") or a boolean ("true", "false"); null or a missing member reads as ""
///   (which select_labels refuses where a value is needed); any other value (an array,
///   an object) is an error. A member repeated within
///   one object keeps its last value, as most JSON readers do.
/// Errors are FormatError "PATH: line N: ..." with the physical line, e.g.
/// "labels.csv: line 17: 3 fields, the header has 4".
Table parse_table(std::string_view text, TableFormat format, const std::string& path);

/// Reads `path` (InputError if it cannot be read) and parses it in the format its
/// extension names (table_format_for).
Table read_table(const std::string& path);

/// `s` as a JSON string literal (invalid UTF-8 replaced): how a table's values and column
/// names are quoted in messages.
std::string json_quoted(std::string_view s);

/// A table of slides' groups (extract --slide-encoder's and predict's --group-table): its
/// columns `slide` and `group_column` as slide → group. InputError naming the file and line for
/// a group that is empty or holds '/', or a slide in two groups.
std::unordered_map<std::string, std::string> read_slide_groups(const std::string& path,
                                                               const std::string& group_column);

}  // namespace mltool::io
