// Writing the on-disk JSON format (IR_SPEC §6; docs/IR.md).
//
// Writing reproduces Python's json.dumps(obj, indent=2) (ensure_ascii, repr() floats) over
// MegakernelProgram.to_dict()'s key order, so a program saved here is byte-identical to the same
// program saved by the reference, and either side loads the other's files.
#include "amk/json.h"
#include "json_internal.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_set>

namespace amk {
namespace json_detail {
namespace {

// Length of the well-formed UTF-8 sequence (RFC 3629) starting at s[i], or 0.
size_t utf8_sequence(std::string_view s, size_t i, uint32_t* cp) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t len = 0;
  uint32_t v = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2, v = c & 0x1Fu;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3, v = c & 0x0Fu;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4, v = c & 0x07u;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (len > s.size() - i) return 0;
  for (size_t k = 1; k < len; ++k) {
    const unsigned char t = byte(i + k);
    if (t < (k == 1 ? lo : 0x80) || t > (k == 1 ? hi : 0xBF)) return 0;
    v = (v << 6) | (t & 0x3Fu);
  }
  *cp = v;
  return len;
}

void append_u_escape(std::string& out, uint32_t unit) {
  static constexpr char kHex[] = "0123456789abcdef";  // Python writes lower case
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(unit >> shift) & 0xFu];
}
}  // namespace

// A JSON string as json.dumps(ensure_ascii=True) writes it. Ill-formed UTF-8 (possible only in a
// Program built in memory; the parser refuses it) becomes U+FFFD so the output always loads.
void append_quoted(std::string& out, std::string_view s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20 || c == 0x7F) append_u_escape(out, c);
          else out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    uint32_t cp = 0;
    size_t len = utf8_sequence(s, i, &cp);
    if (len == 0) cp = 0xFFFD, len = 1;
    if (cp >= 0x10000) {
      cp -= 0x10000;
      append_u_escape(out, 0xD800 + (cp >> 10));
      append_u_escape(out, 0xDC00 + (cp & 0x3FFu));
    } else {
      append_u_escape(out, cp);
    }
    i += len;
  }
  out += '"';
}

std::string quoted(std::string_view s) {
  std::string out;
  append_quoted(out, s);
  return out;
}

// Python's repr(float): the shortest digits that round-trip, positional for exponents in
// [-4, 16), else d.ddde+XX; an integral value keeps its ".0". Non-finite values get Python's
// spellings (NaN, Infinity), which are not JSON: the loader refuses them, as it must.
void append_double(std::string& out, double d) {
  if (std::isnan(d)) {
    out += "NaN";
    return;
  }
  if (std::isinf(d)) {
    out += d < 0 ? "-Infinity" : "Infinity";
    return;
  }
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));  // "-1.2345e+05"
  if (sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c != '.') digits += c;
  std::string_view exp_text = sci.substr(e + 1);
  const bool exp_negative = exp_text.front() == '-';
  if (exp_text.front() == '-' || exp_text.front() == '+') exp_text.remove_prefix(1);
  int exp10 = 0;
  std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exp10);
  if (exp_negative) exp10 = -exp10;
  const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt, Python's convention
  const auto n = static_cast<int>(digits.size());
  if (decpt > 16 || decpt < -3) {
    out += digits[0];
    if (n > 1) {
      out += '.';
      out.append(digits, 1);
    }
    out += exp10 < 0 ? "e-" : "e+";
    const int mag = exp10 < 0 ? -exp10 : exp10;
    if (mag < 10) out += '0';
    out += std::to_string(mag);
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (decpt < n) {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out += '.';
    out.append(digits, static_cast<size_t>(decpt));
  } else {
    out += digits;
    out.append(static_cast<size_t>(decpt - n), '0');
    out += ".0";
  }
}
namespace {

// ---- writing ----------------------------------------------------------------------------------

// json.dumps layout: pretty is indent=2 (",\n" + indent between items, ": " after keys, empty
// containers as [] and {}); compact is separators=(",", ":").
class Writer {
 public:
  explicit Writer(bool pretty) : pretty_(pretty) {}
  void begin(char c) {
    out_ += c;
    first_.push_back(true);
  }
  void end(char c) {
    const bool empty = first_.back();
    first_.pop_back();
    if (!empty) newline();
    out_ += c;
  }
  void item() {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
    newline();
  }
  void key(std::string_view k) {
    item();
    append_quoted(out_, k);
    out_ += pretty_ ? ": " : ":";
  }
  void null() { out_ += "null"; }
  void boolean(bool b) { out_ += b ? "true" : "false"; }
  void integer(int64_t i) { out_ += std::to_string(i); }
  void real(double d) { append_double(out_, d); }
  void str(std::string_view s) { append_quoted(out_, s); }
  void raw(std::string_view s) { out_ += s; }
  std::string take() { return std::move(out_); }

 private:
  void newline() {
    if (!pretty_) return;
    out_ += '\n';
    out_.append(2 * first_.size(), ' ');
  }
  bool pretty_;
  std::vector<bool> first_;
  std::string out_;
};

// Bounded recursion: every Value comes from parse_document's depth limit.
void write_value(Writer& w, const Value& v) {
  switch (v.type) {
    case Value::Type::Null: w.null(); break;
    case Value::Type::Bool: w.boolean(v.b); break;
    case Value::Type::Int: w.integer(v.i); break;
    case Value::Type::BigInt: w.raw(v.s); break;
    case Value::Type::Real: w.real(v.d); break;
    case Value::Type::String: w.str(v.s); break;
    case Value::Type::Array:
    case Value::Type::Streamed:
      w.begin('[');
      for (const Value& e : v.m->items) {
        w.item();
        write_value(w, e);
      }
      w.end(']');
      break;
    case Value::Type::Object:
      w.begin('{');
      for (size_t k = 0; k < v.m->items.size(); ++k) {
        w.key(v.m->keys[k]);
        write_value(w, v.m->items[k]);
      }
      w.end('}');
      break;
  }
}
}  // namespace

std::string compact(const Value& v) {
  Writer w(false);
  write_value(w, v);
  return w.take();
}
namespace {

// A stored JSON text (meta value, Other param). Text that is not JSON a loader would accept can
// only come from a Program built in memory; it is written as a string so the file still loads.
void write_json_text(Writer& w, std::string_view text, size_t max_depth) {
  const Parsed p = parse_document(text, max_depth, nullptr);
  if (p.ok) write_value(w, p.root);
  else w.str(text);
}

void write_target(Writer& w, const GpuTarget& t) {
  w.begin('{');
  w.key("name"), w.str(t.name);
  w.key("sm_arch"), w.integer(t.sm_arch);
  w.key("num_sms"), w.integer(t.num_sms);
  w.key("smem_bytes_per_sm"), w.integer(t.smem_bytes_per_sm);
  w.key("smem_bytes_per_block_optin"), w.integer(t.smem_bytes_per_block_optin);
  w.key("regs_per_sm"), w.integer(t.regs_per_sm);
  w.key("max_threads_per_sm"), w.integer(t.max_threads_per_sm);
  w.key("max_regs_per_thread"), w.integer(t.max_regs_per_thread);
  w.key("l2_bytes"), w.integer(t.l2_bytes);
  w.key("hbm_bytes"), w.integer(t.hbm_bytes);
  w.key("hbm_bandwidth_gbs"), w.real(t.hbm_bandwidth_gbs);
  w.key("fp16_tflops"), w.real(t.fp16_tflops);
  w.key("clock_ghz"), w.real(t.clock_ghz);
  w.key("supports_cooperative"), w.boolean(t.supports_cooperative);
  w.key("wddm_tdr"), w.boolean(t.wddm_tdr);
  w.key("measured_bw_gbs"), w.real(t.measured_bw_gbs);
  w.key("note"), w.str(t.note);
  w.end('}');
}

// Maps built in memory could repeat a key; the loader refuses duplicates, so the writer keeps the
// first and the file stays loadable.
template <typename K>
class FirstSeen {
 public:
  bool operator()(const K& k) { return seen_.insert(k).second; }

 private:
  std::unordered_set<K> seen_;
};

void write_config(Writer& w, const ScheduleConfig& c) {
  w.begin('{');
  w.key("tiling");
  w.begin('{');
  FirstSeen<std::string> archetypes;
  for (const auto& [archetype, sizes] : c.tiling) {
    if (!archetypes(archetype)) continue;
    w.key(archetype);
    w.begin('{');
    FirstSeen<std::string> names;
    for (const auto& [name, size] : sizes)
      if (names(name)) w.key(name), w.integer(size);
    w.end('}');
  }
  w.end('}');
  w.key("fusion_grouping");
  w.begin('[');
  for (const auto& group : c.fusion_grouping) {
    w.item();
    w.begin('[');
    for (const std::string& op : group) w.item(), w.str(op);
    w.end(']');
  }
  w.end(']');
  w.key("sm_assignment");
  if (const auto* policy = std::get_if<std::string>(&c.sm_assignment)) {
    w.str(*policy);
  } else {
    w.begin('{');
    FirstSeen<int64_t> tasks;
    for (const auto& [task, sm] : std::get<ScheduleConfig::ExplicitSmMap>(c.sm_assignment))
      if (tasks(task)) w.key(std::to_string(task)), w.integer(sm);
    w.end('}');
  }
  w.key("pipelining_depth"), w.integer(c.pipelining_depth);
  w.key("page_allocation"), w.str(c.page_allocation);
  w.key("threads_per_block"), w.integer(c.threads_per_block);
  w.key("smem_bytes_per_block"), w.integer(c.smem_bytes_per_block);
  // Written only when set, so files of IR 0.2.0 round-trip byte for byte.
  if (c.stream_chunk_bytes != 0) w.key("stream_chunk_bytes"), w.integer(c.stream_chunk_bytes);
  if (c.stream_bytes_in_flight != 0)
    w.key("stream_bytes_in_flight"), w.integer(c.stream_bytes_in_flight);
  if (c.stream_prefetch_bytes_in_flight != 0)
    w.key("stream_prefetch_bytes_in_flight"), w.integer(c.stream_prefetch_bytes_in_flight);
  w.end('}');
}

void write_int_list(Writer& w, const std::vector<int64_t>& xs) {
  w.begin('[');
  for (int64_t x : xs) w.item(), w.integer(x);
  w.end(']');
}

void write_task(Writer& w, const Task& t) {
  w.begin('{');
  w.key("id"), w.integer(t.id);
  w.key("op"), w.str(name_of(t.op));
  w.key("inputs"), write_int_list(w, t.inputs);
  w.key("outputs"), write_int_list(w, t.outputs);
  w.key("out_counter"), w.integer(t.out_counter);
  w.key("waits");
  w.begin('[');
  for (const Wait& wt : t.waits) {
    w.item();
    w.begin('{');
    w.key("counter"), w.integer(wt.counter);
    w.key("threshold"), w.integer(wt.threshold);
    w.end('}');
  }
  w.end(']');
  w.key("params");
  w.begin('{');
  for (const auto& [name, v] : t.params.items()) {
    w.key(name);
    switch (v.kind) {
      case ParamValue::Kind::Int: w.integer(v.i); break;
      case ParamValue::Kind::Real: w.real(v.f); break;
      case ParamValue::Kind::Other: write_json_text(w, v.other_json, kParamValueDepth); break;
    }
  }
  w.end('}');
  w.key("sm");
  if (t.sm) w.integer(*t.sm);
  else w.null();
  w.key("est_bytes"), w.integer(t.est_bytes);
  w.key("est_flops"), w.integer(t.est_flops);
  w.key("label"), w.str(t.label);
  w.end('}');
}

void write_pages(Writer& w, const PageAllocation& pa) {
  w.begin('{');
  w.key("buffer_to_page");
  w.begin('{');
  FirstSeen<int64_t> buffers;
  for (const auto& [buffer, page] : pa.buffer_to_page)
    if (buffers(buffer)) w.key(std::to_string(buffer)), w.integer(page);
  w.end('}');
  w.key("pages");
  w.begin('[');
  for (const Page& p : pa.pages) {
    w.item();
    w.begin('{');
    w.key("id"), w.integer(p.id);
    w.key("space"), w.str(name_of(p.space));
    w.key("nbytes"), w.integer(p.nbytes);
    w.key("live_start"), w.integer(p.live_start);
    w.key("live_end"), w.integer(p.live_end);
    w.end('}');
  }
  w.end(']');
  w.end('}');
}
}  // namespace
}  // namespace json_detail

using namespace json_detail;

std::string program_to_json(const Program& p) {
  Writer w(true);
  w.begin('{');
  w.key("ir_version"), w.str(p.ir_version);
  w.key("abi_version"), w.str(p.abi_version);
  w.key("meta");
  w.begin('{');
  FirstSeen<std::string> meta_keys;
  for (const auto& [k, text] : p.meta)
    if (meta_keys(k)) w.key(k), write_json_text(w, text, kMetaValueDepth);
  w.end('}');
  w.key("target");
  if (p.target) write_target(w, *p.target);
  else w.null();
  w.key("buffers");
  w.begin('[');
  for (const Buffer& b : p.buffers) {
    w.item();
    w.begin('{');
    w.key("id"), w.integer(b.id);
    w.key("name"), w.str(b.name);
    w.key("kind"), w.str(name_of(b.kind));
    w.key("dtype"), w.str(name_of(b.dtype));
    w.key("shape"), write_int_list(w, b.shape);
    w.key("space"), w.str(name_of(b.space));
    w.key("source");
    if (b.source) w.str(*b.source);
    else w.null();
    if (b.source_box) {  // written only when present: older files stay byte-identical
      const SourceBox& x = *b.source_box;
      w.key("source_box"), write_int_list(w, {x.row0, x.rows, x.col0, x.cols});
    }
    w.end('}');
  }
  w.end(']');
  w.key("counters");
  w.begin('[');
  for (const Counter& c : p.counters) {
    w.item();
    w.begin('{');
    w.key("id"), w.integer(c.id);
    w.key("init"), w.integer(c.init);
    w.key("note"), w.str(c.note);
    w.end('}');
  }
  w.end(']');
  w.key("tasks");
  w.begin('[');
  for (const Task& t : p.tasks) w.item(), write_task(w, t);
  w.end(']');
  w.key("pages");
  if (p.pages) write_pages(w, *p.pages);
  else w.null();
  w.key("config");
  if (p.config) write_config(w, *p.config);
  else w.null();
  w.end('}');
  return w.take();
}

bool save_program(const Program& program, const std::filesystem::path& path, std::string* error) {
  const std::string text = program_to_json(program) + "\n";
  const auto fail_with = [&](const std::string& why) {
    if (error) *error = "cannot save program " + path.string() + ": " + why;
    return false;
  };
  std::FILE* f = std::fopen(path.string().c_str(), "wb");
  if (!f) return fail_with(std::strerror(errno));
  const size_t written = std::fwrite(text.data(), 1, text.size(), f);
  const int write_errno = errno;
  if (written != text.size()) {
    std::fclose(f);
    return fail_with(std::strerror(write_errno));
  }
  if (std::fclose(f) != 0) return fail_with(std::strerror(errno));
  return true;
}

std::string target_to_json(const GpuTarget& target) {
  Writer w(true);
  write_target(w, target);
  return w.take();
}

std::string config_to_json(const ScheduleConfig& config) {
  Writer w(true);
  write_config(w, config);
  return w.take();
}
void Program::set_meta_string(std::string key, std::string_view value) {
  std::string text = quoted(value);
  for (auto& [k, v] : meta)
    if (k == key) {
      v = std::move(text);
      return;
    }
  meta.emplace_back(std::move(key), std::move(text));
}

}  // namespace amk
