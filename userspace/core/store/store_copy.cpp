#include "store/store_copy.h"

#include <regex>

namespace mlprof {

std::string copy_text(const std::vector<SqlRow>& rows) {
  std::string out;
  out.reserve(rows.size() * 64);
  for (const SqlRow& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      if (i) out += '\t';
      if (const auto* n = std::get_if<int64_t>(&row[i])) {
        out += std::to_string(*n);
      } else if (const auto* text = std::get_if<std::string>(&row[i])) {
        for (const char c : *text) {
          switch (c) {
            case '\\':
              out += "\\\\";
              break;
            case '\t':
              out += "\\t";
              break;
            case '\n':
              out += "\\n";
              break;
            case '\r':
              out += "\\r";
              break;
            default:
              out += c;
          }
        }
      } else {
        out += "\\N";
      }
    }
    out += '\n';
  }
  return out;
}

std::string copy_statement(const std::string& insert_sql) {
  // store.py's _PostgresDriver._PLAIN_INSERT, the same shape.
  static const std::regex plain(R"(INSERT INTO (\w+) \(([\w, ]+)\) VALUES \([?, ]+\))");
  std::smatch m;
  if (!std::regex_match(insert_sql, m, plain)) return {};
  return "COPY " + m[1].str() + " (" + m[2].str() + ") FROM STDIN";
}

}  // namespace mlprof
