#include "tokenizer/pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

#include <algorithm>

#include "amk/tokenizer.h"
#include "model/strict_json.h"  // quote_name
#include "tokenizer/utf8.h"

namespace amk::tokenizer_detail {

namespace {

// Unicode White_Space, as a character-class body.
constexpr std::string_view kWhiteSpaceClass =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

// A pattern from a file could backtrack for ever; these bound the work of one match call.
constexpr uint32_t kMatchLimit = 10'000'000;
constexpr uint32_t kDepthLimit = 10'000;
constexpr size_t kMaxPatternBytes = 64 * 1024;

}  // namespace

struct Pattern::Compiled {
  pcre2_code* code = nullptr;
  pcre2_match_context* context = nullptr;
  bool jit = false;
  ~Compiled() {
    pcre2_match_context_free(context);
    pcre2_code_free(code);
  }
};

std::string with_unicode_white_space(std::string_view p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpaceClass) : "[" + std::string(kWhiteSpaceClass) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpaceClass) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Pattern Pattern::regex(std::string_view pattern) {
  if (pattern.size() > kMaxPatternBytes)
    throw TokenizerError(fmt::format("a regex of {} bytes is over the {} byte limit", pattern.size(),
                                     kMaxPatternBytes));
  if (!is_valid_utf8(pattern)) throw TokenizerError("a regex is not valid UTF-8");
  const std::string rewritten = with_unicode_white_space(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto compiled = std::make_shared<Compiled>();
  compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                 PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (compiled->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw TokenizerError(fmt::format("regex {} does not compile: {} (at offset {})",
                                     model_detail::quote_name(pattern),
                                     reinterpret_cast<const char*>(message), offset));
  }
  compiled->jit = pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE) == 0;
  compiled->context = pcre2_match_context_create(nullptr);
  if (compiled->context == nullptr) throw std::bad_alloc();
  pcre2_set_match_limit(compiled->context, kMatchLimit);
  pcre2_set_depth_limit(compiled->context, kDepthLimit);
  Pattern p;
  p.regex_ = std::move(compiled);
  return p;
}

Pattern Pattern::literal(std::string text) {
  Pattern p;
  p.literal_ = std::move(text);
  return p;
}

std::vector<std::pair<size_t, size_t>> Pattern::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> found;
  if (!regex_) {
    if (literal_.empty()) return found;
    for (size_t at = text.find(literal_); at != std::string_view::npos;
         at = text.find(literal_, at + literal_.size()))
      found.emplace_back(at, at + literal_.size());
    return found;
  }
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(regex_->code, nullptr), &pcre2_match_data_free);
  if (!data) throw std::bad_alloc();
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    int rc = pcre2_match(regex_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.get(),
                         regex_->context);
    // The JIT's stack is small; a long run (megabytes of spaces) can exhaust it where the
    // interpreter, which uses the heap, copes.
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(regex_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       data.get(), regex_->context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      throw TokenizerError(fmt::format("regex matching failed: {}", reinterpret_cast<const char*>(message)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.get());
    const size_t begin = ov[0], end = ov[1];
    if (end > begin) {
      found.emplace_back(begin, end);
      start = end;
    } else {
      // An empty match splits nothing; step over one character and look again.
      if (begin >= text.size()) break;
      start = begin + utf8_char_length(text, begin);
    }
  }
  return found;
}

std::vector<std::string_view> split_by(std::string_view text, const Pattern& pattern,
                                       SplitBehavior behavior, bool invert) {
  struct Span {
    size_t begin, end;
    bool is_match;
  };
  std::vector<Span> spans;
  size_t last = 0;
  for (const auto& [b, e] : pattern.find_all(text)) {
    if (b > last) spans.push_back({last, b, invert});
    spans.push_back({b, e, !invert});
    last = e;
  }
  if (last < text.size()) spans.push_back({last, text.size(), invert});

  std::vector<Span> kept;
  switch (behavior) {
    case SplitBehavior::Removed:
      for (const Span& s : spans)
        if (!s.is_match) kept.push_back(s);
      break;
    case SplitBehavior::Isolated:
      kept = spans;
      break;
    case SplitBehavior::MergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !kept.empty())
          kept.back().end = s.end;
        else
          kept.push_back(s);
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool next_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !next_match && !kept.empty())
          kept.back().begin = it->begin;
        else
          kept.push_back(*it);
        next_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
    case SplitBehavior::Contiguous: {
      // Neighbours of the same kind join: runs of matches, and (with invert) runs of what were
      // back-to-back matches of the pattern.
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !kept.empty())
          kept.back().end = s.end;
        else
          kept.push_back(s);
        previous_match = s.is_match;
      }
      break;
    }
  }
  std::vector<std::string_view> pieces;
  for (const Span& s : kept)
    if (s.end > s.begin) pieces.push_back(text.substr(s.begin, s.end - s.begin));
  return pieces;
}

}  // namespace amk::tokenizer_detail
