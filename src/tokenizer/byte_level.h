// GPT-2's byte-level alphabet: every byte is written as one printable character, so a BPE
// vocabulary of strings covers all byte sequences. Printable Latin-1 bytes stand for themselves;
// the other 68 bytes take the code points from U+0100 on, in byte order.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace amk::tokenizer_detail {

// The characters standing for the bytes of `bytes`, as UTF-8.
std::string byte_level_encode(std::string_view bytes);

// Appends the bytes a byte-level token stands for. A token with any character outside the
// alphabet is appended as its own UTF-8 bytes (what `tokenizers` does for added tokens such as
// "<|im_start|>" written in plain text). Returns false in that case.
bool byte_level_decode_append(std::string_view token, std::string& out);

}  // namespace amk::tokenizer_detail
