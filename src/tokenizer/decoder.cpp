#include "tokenizer/decoder.h"

#include <cctype>

#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"  // kMetaspace
#include "tokenizer/utf8.h"

namespace amk::tokenizer_detail {

namespace {

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t last = 0;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + from.size())) {
    out.append(s, last, at - last);
    out += to;
    last = at + from.size();
  }
  if (last == 0) return;
  out.append(s, last);
  s = std::move(out);
}

// The byte a "<0xAB>" token stands for, or -1.
int byte_token_value(const std::string& t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  const auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

void ByteLevelDecoder::decode(std::vector<std::string>& tokens) const {
  std::string bytes;
  for (const std::string& t : tokens) byte_level_decode_append(t, bytes);
  tokens.assign(1, utf8_lossy(bytes));
}

void ReplaceDecoder::decode(std::vector<std::string>& tokens) const {
  for (std::string& t : tokens) replace_all(t, pattern_, content_);
}

void ByteFallbackDecoder::decode(std::vector<std::string>& tokens) const {
  std::vector<std::string> out;
  std::string pending;  // bytes of the current run of byte tokens
  size_t pending_count = 0;
  const auto flush = [&] {
    if (pending_count == 0) return;
    if (is_valid_utf8(pending)) {
      out.push_back(pending);
    } else {
      for (size_t i = 0; i < pending_count; ++i) out.emplace_back(kReplacementChar);
    }
    pending.clear();
    pending_count = 0;
  };
  for (std::string& t : tokens) {
    const int b = byte_token_value(t);
    if (b >= 0) {
      pending.push_back(static_cast<char>(b));
      ++pending_count;
      continue;
    }
    flush();
    out.push_back(std::move(t));
  }
  flush();
  tokens = std::move(out);
}

void FuseDecoder::decode(std::vector<std::string>& tokens) const {
  std::string joined;
  for (const std::string& t : tokens) joined += t;
  tokens.assign(1, std::move(joined));
}

void StripDecoder::decode(std::vector<std::string>& tokens) const {
  if (content_.empty()) return;
  for (std::string& t : tokens) {
    size_t begin = 0, end = t.size();
    for (size_t i = 0; i < start_ && t.compare(begin, content_.size(), content_) == 0 &&
                       begin + content_.size() <= end;
         ++i)
      begin += content_.size();
    for (size_t i = 0; i < stop_ && end >= begin + content_.size() &&
                       t.compare(end - content_.size(), content_.size(), content_) == 0;
         ++i)
      end -= content_.size();
    t = t.substr(begin, end - begin);
  }
}

void MetaspaceDecoder::decode(std::vector<std::string>& tokens) const {
  // As tokenizers does it: in the first token every replacement goes (not only a leading one).
  for (size_t i = 0; i < tokens.size(); ++i)
    replace_all(tokens[i], replacement_, i == 0 && strip_first_space_ ? "" : " ");
}

void SequenceDecoder::decode(std::vector<std::string>& tokens) const {
  for (const auto& step : steps_) step->decode(tokens);
}

std::unique_ptr<Decoder> make_sentencepiece_decoder(bool strip_dummy_prefix) {
  std::vector<std::unique_ptr<Decoder>> steps;
  steps.push_back(std::make_unique<ReplaceDecoder>(std::string(kMetaspace), " "));
  steps.push_back(std::make_unique<ByteFallbackDecoder>());
  steps.push_back(std::make_unique<FuseDecoder>());
  if (strip_dummy_prefix) steps.push_back(std::make_unique<StripDecoder>(" ", 1, 0));
  return std::make_unique<SequenceDecoder>(std::move(steps));
}

}  // namespace amk::tokenizer_detail
