// `amk tokenize SOURCE (-p TEXT | --jsonl FILE) [--add-special] [--decode [--skip-special]]`:
// text to token ids with a model's tokenizer (a model folder, a tokenizer.json, a SentencePiece
// .model, or a .gguf file's vocabulary). -p prints the ids and each token's piece for people;
// --jsonl reads one JSON string per line and writes one JSON array of ids per line, for
// programs. --decode goes the other way: -p takes ids ("1,2,3" or "1 2 3"), --jsonl lines are
// arrays of ids and come back as strings.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "amk/tokenizer.h"
#include "cli/commands.h"
#include "cli/input_files.h"
#include "model/strict_json.h"  // quote_name, parse_untrusted_json
#include "tokenizer/utf8.h"

namespace amk::cli {

namespace {

// A JSONL input of prompts is text; a gigabyte of it is a mistake.
constexpr uint64_t kMaxJsonlBytes = uint64_t{1} << 30;

struct TokenizeOptions {
  std::string source, prompt, jsonl;
  bool has_prompt = false;
  bool add_special = false, decode = false, skip_special = false;
};

// "1,2,3", "1 2 3" or "[1, 2, 3]": the ids, or nullopt with `why` set.
std::optional<std::vector<int32_t>> parse_ids(const std::string& text, std::string* why) {
  std::vector<int32_t> ids;
  size_t i = 0;
  const auto separator = [](char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '[' || c == ']'; };
  while (i < text.size()) {
    if (separator(text[i])) {
      ++i;
      continue;
    }
    int32_t id = 0;
    const auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size(), id);
    if (ec != std::errc() || id < 0 || (end != text.data() + text.size() && !separator(*end))) {
      *why = fmt::format("{} is not a list of token ids (non-negative integers)", model_detail::quote_name(text));
      return std::nullopt;
    }
    ids.push_back(id);
    i = static_cast<size_t>(end - text.data());
  }
  return ids;
}

// A token's text for a terminal: UTF-8 as it is, control characters and bytes that are not UTF-8
// escaped (a piece may hold either; neither should reach a terminal raw).
std::string printable(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = tokenizer_detail::utf8_sequence_length(s, i);
    const bool c1_control = n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0;
    if (n == 0 || c < 0x20 || c == 0x7F || c == '\\' || c1_control) {
      const size_t len = c1_control ? 2 : 1;
      for (size_t k = 0; k < len; ++k) out += fmt::format("\\x{:02x}", static_cast<unsigned char>(s[i + k]));
      i += len;
      continue;
    }
    out.append(s.substr(i, n));
    i += n;
  }
  return out;
}

int bad_input(const std::string& what) {
  std::cerr << "amk: " << what << "\n";
  return kExitBadInput;
}

int tokenize_prompt(const Tokenizer& tok, const TokenizeOptions& opt) {
  if (opt.decode) {
    std::string why;
    const auto ids = parse_ids(opt.prompt, &why);
    if (!ids) return bad_input("-p: " + why);
    std::cout << tok.decode(*ids, opt.skip_special) << "\n";
    return kExitOk;
  }
  const std::vector<int32_t> ids = tok.encode(opt.prompt, opt.add_special);
  std::cout << fmt::format("{} tokens ({}, vocabulary {})\n", ids.size(), tok.description(), tok.vocab_size());
  std::cout << fmt::format("ids  {}\n", fmt::join(ids, " "));
  // Each token: its id, its vocabulary entry, and the text it adds in context: decoding the ids
  // up to it minus decoding those before it (a token alone can decode differently: SentencePiece
  // drops the first space, a byte of a longer character is U+FFFD). Quadratic, so only for
  // prompts a person reads; past that, each token alone.
  constexpr size_t kMaxInContext = 2000;
  std::string before;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string text;
    if (ids.size() <= kMaxInContext) {
      std::string upto = tok.decode(std::span(ids.data(), i + 1));
      text = upto.starts_with(before) ? upto.substr(before.size()) : tok.decode(std::span(&ids[i], 1));
      before = std::move(upto);
    } else {
      text = tok.decode(std::span(&ids[i], 1));
    }
    std::cout << fmt::format("{:>8}  {:<24} {}{}\n", ids[i], "'" + printable(tok.token_text(ids[i])) + "'",
                             nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                             tok.is_special(ids[i]) ? "  (special)" : "");
  }
  return kExitOk;
}

int tokenize_jsonl(const Tokenizer& tok, const TokenizeOptions& opt) {
  std::string why;
  const auto text = read_input_text(opt.jsonl, kMaxJsonlBytes, &why);
  if (!text) return bad_input(opt.jsonl + ": " + why);
  std::istringstream in(*text);
  std::string out;
  size_t line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines carry nothing
    const std::string where = fmt::format("{}:{}", opt.jsonl, line_number);
    nlohmann::json value;
    try {
      value = model_detail::parse_untrusted_json(line);
    } catch (const std::exception& e) {
      return bad_input(fmt::format("{}: not JSON: {}", where, e.what()));
    }
    if (opt.decode) {
      std::vector<int32_t> ids;
      if (!value.is_array()) return bad_input(where + ": expected a JSON array of token ids");
      for (const auto& v : value) {
        if (!v.is_number_unsigned() || v.get<uint64_t>() > uint64_t(INT32_MAX))
          return bad_input(where + ": expected a JSON array of token ids");
        ids.push_back(static_cast<int32_t>(v.get<uint64_t>()));
      }
      try {
        out += nlohmann::json(tok.decode(ids, opt.skip_special)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      } catch (const TokenizerError& e) {
        return bad_input(fmt::format("{}: {}", where, e.what()));
      }
    } else {
      if (!value.is_string()) return bad_input(where + ": expected a JSON string");
      out += nlohmann::json(tok.encode(value.get_ref<const std::string&>(), opt.add_special)).dump();
    }
    out += '\n';
  }
  std::cout << out;
  return kExitOk;
}

int run_tokenize(const TokenizeOptions& opt) {
  if (opt.has_prompt == !opt.jsonl.empty()) return bad_input("tokenize: give exactly one of -p TEXT and --jsonl FILE");
  std::optional<Tokenizer> tok;
  try {
    tok = Tokenizer::from_path(opt.source);
  } catch (const TokenizerError& e) {
    return bad_input(e.what());
  }
  try {
    return opt.has_prompt ? tokenize_prompt(*tok, opt) : tokenize_jsonl(*tok, opt);
  } catch (const TokenizerError& e) {
    return bad_input(e.what());
  }
}

}  // namespace

void add_tokenize_command(CLI::App& app, Action& action) {
  auto opt = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Text to token ids (and back) with a model's tokenizer.json, SentencePiece .model or GGUF vocabulary");
  cmd->add_option("source", opt->source, "Model folder, tokenizer.json, SentencePiece .model or .gguf file")->required();
  cmd->add_option("-p,--prompt", opt->prompt, "Text to tokenize (with --decode: ids such as 1,2,3)");
  cmd->add_option("--jsonl", opt->jsonl,
                  "File (- for stdin) of one JSON string per line; prints one JSON array of ids per line");
  cmd->add_flag("--add-special", opt->add_special, "Add what the tokenizer adds around a sequence (BOS ...)");
  cmd->add_flag("--decode", opt->decode, "Ids to text instead");
  cmd->add_flag("--skip-special", opt->skip_special, "With --decode: leave special tokens out");
  cmd->callback([opt, cmd, &action] {
    opt->has_prompt = cmd->count("--prompt") > 0;
    action = [opt] { return run_tokenize(*opt); };
  });
}

}  // namespace amk::cli
