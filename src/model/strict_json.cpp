#include "model/strict_json.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>
#include <vector>

namespace amk::model_detail {
namespace {

// Counts bracket depth outside strings. The scan's depth at any byte is at least the depth the
// real parser reaches there (the parser tokenises strings the same way and stops at the first
// malformed token), so passing the scan bounds the parser's depth.
void check_depth(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // whatever follows a backslash cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth)
        throw std::runtime_error(
            fmt::format("JSON nested deeper than {} levels (at byte {})", max_depth, i));
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

}  // namespace

nlohmann::json parse_untrusted_json(std::string_view text, int max_depth) {
  check_depth(text, max_depth);

  // One key set per open container; arrays get an unused set so push/pop stay paired.
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  const nlohmann::json::parser_callback_t callback =
      [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        using E = nlohmann::json::parse_event_t;
        switch (event) {
          case E::object_start:
          case E::array_start:
            keys.emplace_back();
            break;
          case E::object_end:
          case E::array_end:
            if (!keys.empty()) keys.pop_back();
            break;
          case E::key:
            if (duplicate.empty() && !keys.empty() && parsed.is_string() &&
                !keys.back().insert(parsed.get<std::string>()).second)
              duplicate = parsed.get<std::string>();
            break;
          case E::value:
            break;
        }
        return true;
      };

  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true,
                                /*ignore_comments=*/false);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's messages start with "[json.exception.parse_error.101] "; keep the useful part.
    std::string what = e.what();
    if (const auto pos = what.find("] "); what.rfind("[json.exception", 0) == 0 && pos != std::string::npos)
      what = what.substr(pos + 2);
    throw std::runtime_error("not valid JSON: " + what);
  }
  if (!duplicate.empty())
    throw std::runtime_error(fmt::format("duplicate key {}", quote_name(duplicate)));
  return doc;
}

std::string read_text_file(const std::filesystem::path& path, uint64_t max_bytes) {
  std::error_code ec;
  // A FIFO would block the open forever and a device never end: regular files only (symlinks
  // followed), and the size checked before anything is read.
  if (!std::filesystem::is_regular_file(path, ec))
    throw std::runtime_error(ec ? "cannot open: " + ec.message() : "not a regular file");
  if (const uintmax_t size = std::filesystem::file_size(path, ec); !ec && size > max_bytes)
    throw std::runtime_error(
        fmt::format("{} bytes, larger than the {}-byte limit for a JSON file", size, max_bytes));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot open: {}", std::strerror(errno)));
  std::string text;
  char buf[65536];
  while (in) {
    in.read(buf, sizeof buf);
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > max_bytes)
      throw std::runtime_error(fmt::format("larger than the {}-byte limit for a JSON file", max_bytes));
  }
  if (in.bad()) throw std::runtime_error("read error");
  return text;
}

std::string quote_name(std::string_view s) {
  std::string out = "'";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c >= 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += ch;
    }
  }
  out += '\'';
  return out;
}

std::string_view json_type_word(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::boolean: return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return "an integer";
    case nlohmann::json::value_t::number_float: return "a real number";
    case nlohmann::json::value_t::binary: return "binary";
    case nlohmann::json::value_t::discarded: return "discarded";
  }
  return "unknown";
}

}  // namespace amk::model_detail
