// UTF-8 as Python's str sees it: templates index, slice and measure strings in code points, while
// amk keeps them as UTF-8 bytes. Decoding is lenient (an invalid byte counts as one code point)
// because templates and messages are untrusted and must never make the interpreter fail on
// arbitrary bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace amk::tmpl {

void append_utf8(std::string& out, uint32_t code_point);
// Decodes the code point at `pos` and moves `pos` past it; an invalid byte decodes as itself.
uint32_t decode_utf8(std::string_view s, size_t& pos);
// The byte offset where each code point starts, plus s.size() at the end.
std::vector<size_t> code_point_offsets(std::string_view s);
size_t code_point_count(std::string_view s);

}  // namespace amk::tmpl
