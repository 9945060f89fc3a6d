#include "mltool/io/table.hpp"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <utility>

#include "mltool/util/error.hpp"
#include "mltool/util/file.hpp"

namespace mltool::io {
namespace {

using ordered_json = nlohmann::ordered_json;

[[noreturn]] void fail_at(const std::string& path, std::uint64_t line, const std::string& what) {
  throw FormatError(at_file(path, "line " + std::to_string(line) + ": " + what));
}

// The header checks shared by every format: names present and distinct.
void check_header(const Table& t, std::uint64_t line) {
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    if (t.columns[c].empty()) {
      fail_at(t.path, line, "column " + std::to_string(c + 1) + " of the header has no name");
    }
    for (std::size_t d = 0; d < c; ++d) {
      if (t.columns[d] == t.columns[c]) {
        fail_at(t.path, line,
                "duplicate column " + json_quoted(t.columns[c]) + " (columns " +
                    std::to_string(d + 1) + " and " + std::to_string(c + 1) + ")");
      }
    }
  }
}

// Adds a parsed line: the first becomes the header, the others rows of its width.
void add_line(Table& t, std::vector<std::string>&& fields, std::uint64_t line) {
  if (t.columns.empty()) {
    t.columns = std::move(fields);
    check_header(t, line);
    return;
  }
  if (fields.size() != t.columns.size()) {
    fail_at(t.path, line,
            std::to_string(fields.size()) + (fields.size() == 1 ? " field" : " fields") +
                ", the header has " + std::to_string(t.columns.size()));
  }
  t.rows.push_back(std::move(fields));
  t.lines.push_back(line);
}

// A CSV text read field by field: where it is, and the physical line (a quoted line break
// moves it on, so errors point at the line where they are).
struct CsvCursor {
  std::string_view s;
  std::size_t pos;
  const std::string& path;
  std::uint64_t line = 1;

  bool at_end() const { return pos >= s.size(); }
  bool at(char c) const { return pos < s.size() && s[pos] == c; }
  bool next_is(char c) const { return pos + 1 < s.size() && s[pos + 1] == c; }
  bool at_field_end() const {
    return at_end() || s[pos] == ',' || s[pos] == '\n' || s[pos] == '\r';
  }
};

// A quoted field, from its opening quote to past its closing one; "" inside is one quote.
std::string quoted_field(CsvCursor& c, const std::string& field_no) {
  const std::uint64_t open_line = c.line;
  std::string field;
  for (++c.pos;; ++c.pos) {
    if (c.at_end()) fail_at(c.path, open_line, field_no + ": quoted field is never closed");
    if (c.s[c.pos] == '"') {
      if (!c.next_is('"')) break;
      ++c.pos;  // "" is a quote
    } else if (c.s[c.pos] == '\n') {
      ++c.line;
    }
    field += c.s[c.pos];
  }
  ++c.pos;  // the closing quote
  if (!c.at_field_end())
    fail_at(c.path, c.line,
            field_no +
                ": text after the closing quote (a quote inside a quoted field is written \"\")");
  return field;
}

std::string plain_field(CsvCursor& c, const std::string& field_no) {
  std::string field;
  for (; !c.at_field_end(); ++c.pos) {
    if (c.s[c.pos] == '"')
      fail_at(c.path, c.line,
              field_no +
                  ": quote inside an unquoted field (quote the whole field and write the quote "
                  "as \"\")");
    field += c.s[c.pos];
  }
  return field;
}

// After a field: false past a comma (another field follows), true where the record ends (the
// end of the text, or past its LF or CRLF).
bool record_ends(CsvCursor& c) {
  if (c.at_end()) return true;
  if (c.s[c.pos] == ',') {
    ++c.pos;
    return false;
  }
  if (c.s[c.pos] == '\r') {
    if (!c.next_is('\n')) fail_at(c.path, c.line, "carriage return not followed by a line feed");
    ++c.pos;
  }
  ++c.pos;  // the '\n'
  ++c.line;
  return true;
}

// Past an empty line (LF or CRLF) if one is next.
bool skipped_empty_line(CsvCursor& c) {
  const std::size_t width = c.at('\n') ? 1 : c.at('\r') && c.next_is('\n') ? 2 : 0;
  c.pos += width;
  c.line += width > 0;
  return width > 0;
}

// RFC 4180; see parse_table.
void parse_csv(std::string_view s, std::size_t pos, Table& t) {
  CsvCursor c{s, pos, t.path};
  while (!c.at_end()) {
    if (skipped_empty_line(c)) continue;
    const std::uint64_t start_line = c.line;
    std::vector<std::string> fields;
    do {
      const std::string field_no = "field " + std::to_string(fields.size() + 1);
      fields.push_back(c.at('"') ? quoted_field(c, field_no) : plain_field(c, field_no));
    } while (!record_ends(c));
    add_line(t, std::move(fields), start_line);
  }
}

// Calls visit(line_text, line_number) for every line without its LF or CRLF; a CR
// anywhere else is an error (it would end up inside a key or a label).
template <typename Visit>
void for_each_line(std::string_view s, std::size_t pos, const std::string& path, Visit visit) {
  for (std::uint64_t line = 1; pos < s.size(); ++line) {
    std::size_t end = s.find('\n', pos);
    if (end == std::string_view::npos) end = s.size();
    std::string_view text = s.substr(pos, end - pos);
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.find('\r') != std::string_view::npos) {
      fail_at(path, line, "carriage return inside a line");
    }
    visit(text, line);
    pos = end + 1;
  }
}

void parse_tsv(std::string_view s, std::size_t pos, Table& t) {
  for_each_line(s, pos, t.path, [&](std::string_view text, std::uint64_t line) {
    if (text.empty()) return;
    std::vector<std::string> fields;
    for (std::size_t from = 0;;) {
      const std::size_t tab = text.find('\t', from);
      fields.emplace_back(text.substr(from, tab == std::string_view::npos ? tab : tab - from));
      if (tab == std::string_view::npos) break;
      from = tab + 1;
    }
    add_line(t, std::move(fields), line);
  });
}

// nlohmann's message without its "[json.exception.parse_error.101] " tag, and with
// "line 1, " dropped: every JSONL line is parsed alone, so its line is always 1.
std::string json_message(const std::string& what) {
  std::string m = what;
  if (m.rfind("[json.exception.", 0) == 0) {
    const std::size_t end = m.find("] ");
    if (end != std::string::npos) m = m.substr(end + 2);
  }
  const std::string one = "at line 1, column";
  const std::size_t at = m.find(one);
  if (at != std::string::npos) m.replace(at, one.size(), "at column");
  return m;
}

const char* kind_of(const ordered_json& v) {
  if (v.is_number_float()) return "a fractional number";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return v.type_name();
}

void parse_jsonl(std::string_view s, std::size_t pos, Table& t) {
  std::unordered_map<std::string, std::size_t> index;  // column name → position
  std::vector<std::pair<std::vector<std::string>, std::uint64_t>> pending;
  for_each_line(s, pos, t.path, [&](std::string_view text, std::uint64_t line) {
    if (text.find_first_not_of(" \t") == std::string_view::npos) return;
    ordered_json doc;
    try {
      doc = ordered_json::parse(text);
    } catch (const ordered_json::parse_error& e) {
      fail_at(t.path, line, "invalid JSON: " + json_message(e.what()));
    } catch (const ordered_json::out_of_range& e) {  // a number too large for a double
      fail_at(t.path, line, "invalid JSON: " + json_message(e.what()));
    }
    if (!doc.is_object()) {
      fail_at(t.path, line, std::string("expected a JSON object, got ") + kind_of(doc));
    }
    std::vector<std::string> fields(t.columns.size());
    for (const auto& [name, value] : doc.items()) {
      auto [it, added] = index.emplace(name, t.columns.size());
      if (added) {
        if (name.empty()) fail_at(t.path, line, "a member has an empty name");
        t.columns.push_back(name);
        fields.emplace_back();
      }
      std::string& field = fields[it->second];
      if (value.is_string()) {
        field = value.get<std::string>();
      } else if (value.is_number_unsigned()) {
        field = std::to_string(value.get<std::uint64_t>());
      } else if (value.is_number_integer()) {
        field = std::to_string(value.get<std::int64_t>());
      } else if (value.is_number_float() || value.is_boolean()) {
        field = value.dump();  // the shortest text that reads back as the double; true, false
      } else if (!value.is_null()) {
        fail_at(t.path, line,
                json_quoted(name) + ": expected a string, a number or a boolean, got " +
                    kind_of(value));
      }
    }
    pending.emplace_back(std::move(fields), line);
  });
  // Rows read before a column first appeared lack it: pad them to the final width.
  for (auto& [fields, line] : pending) {
    fields.resize(t.columns.size());
    t.rows.push_back(std::move(fields));
    t.lines.push_back(line);
  }
}

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix.data(), suffix.size()) == 0;
}

}  // namespace

std::string json_quoted(std::string_view s) {
  return nlohmann::json(std::string(s))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

TableFormat table_format_for(const std::string& path) {
  const std::string lower = lowercase(path);
  if (ends_with(lower, ".csv")) return TableFormat::csv;
  if (ends_with(lower, ".tsv")) return TableFormat::tsv;
  if (ends_with(lower, ".jsonl")) return TableFormat::jsonl;
  throw InputError(
      at_file(path, "unknown labels table format: expected a .csv, .tsv or .jsonl file"));
}

std::size_t Table::column(const std::string& name) const {
  const auto it = std::find(columns.begin(), columns.end(), name);
  if (it != columns.end()) return static_cast<std::size_t>(it - columns.begin());
  std::string list;
  for (const std::string& c : columns) list += (list.empty() ? "" : ", ") + c;
  throw InputError(
      at_file(path, "no column " + json_quoted(name) + " (the columns are: " + list + ")"));
}

Table parse_table(std::string_view text, TableFormat format, const std::string& path) {
  Table t;
  t.path = path;
  const std::size_t start = text.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
  switch (format) {
    case TableFormat::csv: parse_csv(text, start, t); break;
    case TableFormat::tsv: parse_tsv(text, start, t); break;
    case TableFormat::jsonl: parse_jsonl(text, start, t); break;
  }
  if (t.columns.empty()) {
    throw FormatError(at_file(path, format == TableFormat::jsonl
                                        ? "empty file, expected one JSON object per line"
                                        : "empty file, expected a header line"));
  }
  return t;
}

Table read_table(const std::string& path) {
  const TableFormat format = table_format_for(path);
  return parse_table(util::read_file(path), format, path);
}

std::unordered_map<std::string, std::string> read_slide_groups(const std::string& path,
                                                               const std::string& group_column) {
  const Table table = read_table(path);
  const std::size_t slide = table.column("slide"), group = table.column(group_column);
  std::unordered_map<std::string, std::string> out;
  for (std::size_t i = 0; i < table.rows.size(); ++i) {
    const auto& row = table.rows[i];
    const std::string where = "line " + std::to_string(table.lines[i]) + ": ";
    if (row[group].empty() || row[group].find('/') != std::string::npos)
      throw InputError(at_file(table.path, where + "group " + json_quoted(row[group]) +
                                               " must be non-empty and hold no '/'"));
    const auto [it, added] = out.emplace(row[slide], row[group]);
    if (!added && it->second != row[group])
      throw InputError(at_file(table.path, where + "slide " + json_quoted(row[slide]) +
                                               " is in two groups, " + json_quoted(it->second) +
                                               " and " + json_quoted(row[group])));
  }
  return out;
}

}  // namespace mltool::io
