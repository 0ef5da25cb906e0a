// Reading the on-disk JSON format (IR_SPEC §6; docs/IR.md).
//
// Reading has two layers. A SAX handler on nlohmann's (iterative) parser builds a small DOM of our
// own (json_internal.h): it refuses nesting deeper than kMaxDepth before anything deep exists,
// refuses duplicate keys (a map would keep one silently), and keeps integer literals that do not
// fit int64 as their text (a double would round them). Each record of the three big top-level
// arrays is decoded as soon as it is complete and then dropped, so memory follows the Program
// rather than a DOM ten times the file. A typed decoder then walks what is left; every error it
// reports names the JSON path.
#include "amk/json.h"
#include "json_internal.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <system_error>
#include <unordered_map>
#include <unordered_set>

namespace amk {
namespace json_detail {
namespace {

constexpr uint64_t kMaxFileBytes = uint64_t{1} << 30;
// Values held at once outside the streamed record arrays (plus the record being built). Real
// programs hold a few per task at most (an explicit SM map); this stops `[0,0,0,...]` from
// turning a 1 GiB file into tens of GiB of DOM.
constexpr size_t kMaxHeldValues = size_t{4} << 20;
constexpr size_t kMaxWarnings = 100;

// ---- text -------------------------------------------------------------------------------------

// For messages: quoted, and cut short so a 1 MB string does not become a 1 MB error.
std::string quoted_short(std::string_view s) {
  if (s.size() <= kShortText) return quoted(s);
  std::string out = quoted(s.substr(0, kShortText));
  out.insert(out.size() - 1, "...");
  return out;
}

bool is_identifier(std::string_view k) {
  if (k.empty() || (k[0] >= '0' && k[0] <= '9')) return false;
  for (char c : k)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
      return false;
  return true;
}

void append_key_segment(std::string& out, std::string_view key) {
  if (is_identifier(key)) {
    out += '.';
    out += key;
  } else {
    out += '[';
    out += quoted_short(key);
    out += ']';
  }
}

void append_index_segment(std::string& out, size_t index) {
  out += '[';
  out += std::to_string(index);
  out += ']';
}

// Decimal integer keys ("3", "-1") as ScheduleConfig/PageAllocation write their int-keyed maps.
bool parse_int_key(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  const char* first = s.data();
  const char* last = s.data() + s.size();
  if (*first == '-' && s.size() == 1) return false;
  for (const char* p = first + (*first == '-'); p != last; ++p)
    if (*p < '0' || *p > '9') return false;
  const auto res = std::from_chars(first, last, *out);
  return res.ec == std::errc() && res.ptr == last;
}
// ---- the parser -------------------------------------------------------------------------------

// The nlohmann SAX handler. Returning false stops the parse at once.
class Builder {
 public:
  enum class Failure { None, Syntax, Depth, Other };

  Builder(size_t max_depth, RecordSink* sink) : max_depth_(max_depth), sink_(sink) {}

  bool null() { return put(Value{}); }
  bool boolean(bool b) {
    Value v;
    v.type = Value::Type::Bool;
    v.b = b;
    return put(std::move(v));
  }
  bool number_integer(int64_t i) {
    Value v;
    v.type = Value::Type::Int;
    v.i = i;
    return put(std::move(v));
  }
  bool number_unsigned(uint64_t u) {
    Value v;
    if (u <= static_cast<uint64_t>(INT64_MAX)) {
      v.type = Value::Type::Int;
      v.i = static_cast<int64_t>(u);
    } else {
      v.type = Value::Type::BigInt;
      v.s = std::to_string(u);
    }
    return put(std::move(v));
  }
  // nlohmann hands integer literals beyond uint64 to us as doubles; their text tells them apart.
  bool number_float(double d, const std::string& text) {
    Value v;
    if (text.find_first_of(".eE") == std::string::npos) {
      v.type = Value::Type::BigInt;
      v.s = text;
    } else {
      v.type = Value::Type::Real;
      v.d = d;  // finite: the parser reports overflow itself
    }
    return put(std::move(v));
  }
  bool string(std::string& s) {
    Value v;
    v.type = Value::Type::String;
    v.s = std::move(s);
    return put(std::move(v));
  }
  bool binary(nlohmann::json::binary_t&) { return fail(Failure::Other, "binary value in JSON"); }
  bool start_object(size_t) { return open(Value::Type::Object); }
  bool start_array(size_t) { return open(Value::Type::Array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& k) {
    Frame& f = frames_.back();
    std::vector<std::string>& keys = f.v.m->keys;
    bool duplicate = false;
    if (f.key_index) {
      duplicate = !f.key_index->insert(k).second;
    } else {
      for (const std::string& seen : keys) duplicate = duplicate || seen == k;
      // Linear search is fastest for records; a big map switches to hashing.
      if (!duplicate && keys.size() >= 16) {
        f.key_index = std::make_unique<std::unordered_set<std::string>>(keys.begin(), keys.end());
        f.key_index->insert(k);
      }
    }
    if (duplicate) {
      std::string where = path_of(frames_.size() - 1);
      append_key_segment(where, k);
      return fail(Failure::Other, where + ": duplicate key " + quoted_short(k));
    }
    keys.push_back(std::move(k));
    return true;
  }
  bool parse_error(size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& ex) {
    position_ = position;
    last_token_ = last_token;
    return fail(Failure::Syntax, ex.what());
  }

  Failure failure() const { return failure_; }
  const std::string& message() const { return message_; }
  size_t position() const { return position_; }
  const std::string& last_token() const { return last_token_; }
  Value& root() { return root_; }

 private:
  struct Frame {
    Value v;
    std::unique_ptr<std::unordered_set<std::string>> key_index;
    int stream = -1;       // index into kRecordArrays when elements go to the sink
    size_t streamed = 0;   // elements handed to the sink so far
    size_t held_mark = 0;  // held_ before the current element began
  };

  bool fail(Failure f, std::string message) {
    failure_ = f;
    message_ = std::move(message);
    return false;
  }

  bool count() {
    if (++held_ <= kMaxHeldValues) return true;
    return fail(Failure::Other, "more than " + std::to_string(kMaxHeldValues) +
                                    " JSON values outside the buffers/counters/tasks records "
                                    "(or in one record); refusing to hold them");
  }

  bool put(Value v) { return count() && attach(std::move(v)); }

  bool attach(Value v) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return true;
    }
    Frame& f = frames_.back();
    if (f.stream >= 0) {
      sink_->record(static_cast<size_t>(f.stream), f.streamed++, v);
      held_ = f.held_mark;
      return true;
    }
    f.v.m->items.push_back(std::move(v));
    return true;
  }

  bool open(Value::Type type) {
    if (frames_.size() >= max_depth_) return fail(Failure::Depth, {});
    if (!count()) return false;
    Frame f;
    f.v.type = type;
    f.v.m = std::make_unique<Members>();
    if (type == Value::Type::Array && sink_ && frames_.size() == 1 &&
        frames_[0].v.type == Value::Type::Object) {
      const std::string& k = frames_[0].v.m->keys.back();
      for (size_t a = 0; a < kRecordArrays.size(); ++a)
        if (k == kRecordArrays[a]) {
          f.stream = static_cast<int>(a);
          f.v.type = Value::Type::Streamed;
          f.held_mark = held_;
        }
    }
    frames_.push_back(std::move(f));
    return true;
  }

  bool close() {
    Value v = std::move(frames_.back().v);
    frames_.pop_back();
    return attach(std::move(v));
  }

  // The path of the value being built inside frames_[n - 1].
  std::string path_of(size_t n) const {
    std::string p = "$";
    for (size_t k = 0; k < n; ++k) {
      const Frame& f = frames_[k];
      if (f.v.type == Value::Type::Object) append_key_segment(p, f.v.m->keys.back());
      else append_index_segment(p, f.stream >= 0 ? f.streamed : f.v.m->items.size());
    }
    return p;
  }

  size_t max_depth_;
  RecordSink* sink_;
  std::vector<Frame> frames_;
  Value root_;
  size_t held_ = 0;
  Failure failure_ = Failure::None;
  std::string message_;
  size_t position_ = 0;
  std::string last_token_;
};

// Where the first bracket past max_depth is. Called only after the builder stopped there, so the
// text before it is valid JSON and a plain string-aware bracket count agrees with the parser.
size_t depth_violation_offset(std::string_view text, size_t max_depth) {
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;
    }
  }
  return text.size();
}

// Bytes that are not printable ASCII become \xNN, so a message is always clean text.
std::string printable(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7F) {
      out += ch;
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xFu];
    }
  }
  return out;
}

std::string syntax_message(std::string_view text, const Builder& b) {
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return "syntax error at byte 0: empty input (expected a JSON object)";
  // nlohmann counts the byte it stopped on; report that byte's 0-based offset.
  const size_t byte = std::min(b.position() > 0 ? b.position() - 1 : 0, text.size());
  size_t line = 1, column = 1;
  for (size_t i = 0; i < byte; ++i) {
    if (text[i] == '\n') ++line, column = 1;
    else ++column;
  }
  std::string detail = b.message();
  if (detail.rfind("[json.exception.", 0) == 0) detail.erase(0, detail.find("] ") + 2);
  if (detail.rfind("parse error at line ", 0) == 0) {
    const size_t colon = detail.find(": ");
    if (colon != std::string::npos) detail.erase(0, colon + 2);
  }
  // The token nlohmann quotes can be a whole (huge) string: keep its tail, where the error is.
  const std::string& token = b.last_token();
  const std::string marker = "last read: '" + token + "'";
  if (const size_t at = detail.find(marker); at != std::string::npos && token.size() > kShortText) {
    detail.replace(at, marker.size(),
                   "last read: '..." + token.substr(token.size() - kShortText) + "'");
  }
  detail = printable(detail);
  if (detail.size() > 4 * kShortText) detail = detail.substr(0, 4 * kShortText) + "...";
  std::string msg = "syntax error at byte " + std::to_string(byte) + " (line " +
                    std::to_string(line) + ", column " + std::to_string(column) +
                    "): " + detail;
  size_t start = std::min(byte, text.size());
  while (start > 0 && (std::isalpha(static_cast<unsigned char>(text[start - 1])) ||
                       text[start - 1] == '-'))
    --start;
  const std::string_view at = text.substr(start);
  if (at.rfind("NaN", 0) == 0 || at.rfind("Infinity", 0) == 0 || at.rfind("-Infinity", 0) == 0)
    msg += " (NaN and Infinity are not JSON: Python's json writes them for non-finite floats, "
           "and a program with a non-finite number cannot be loaded)";
  return msg;
}

}  // namespace

Parsed parse_document(std::string_view text, size_t max_depth, RecordSink* sink) {
  Parsed out;
  Builder b(max_depth, sink);
  const bool ok = nlohmann::json::sax_parse(text.data(), text.data() + text.size(), &b);
  if (ok && b.failure() == Builder::Failure::None) {
    out.ok = true;
    out.root = std::move(b.root());
    return out;
  }
  switch (b.failure()) {
    case Builder::Failure::Depth:
      out.error = "nesting deeper than " + std::to_string(max_depth) + " levels at byte " +
                  std::to_string(depth_violation_offset(text, max_depth));
      break;
    case Builder::Failure::Syntax: out.error = syntax_message(text, b); break;
    default: out.error = b.message().empty() ? "unreadable JSON" : b.message(); break;
  }
  return out;
}

namespace {

// ---- decoding ---------------------------------------------------------------------------------

// A JSON path as a chain of stack frames, formatted only when a message needs it.
struct Path {
  const Path* parent = nullptr;  // nullptr: the root, "$"
  std::string_view key;
  size_t index = 0;
  bool is_index = false;

  Path child(std::string_view k) const { return Path{this, k, 0, false}; }
  Path child(size_t i) const { return Path{this, {}, i, true}; }
  // pattern: indices as [*], to group the same warning across records
  std::string str(bool pattern = false) const {
    std::vector<const Path*> chain;
    for (const Path* p = this; p->parent; p = p->parent) chain.push_back(p);
    std::string out = "$";
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      if (!(*it)->is_index) append_key_segment(out, (*it)->key);
      else if (pattern) out += "[*]";
      else append_index_segment(out, (*it)->index);
    }
    return out;
  }
};

struct DecodeError {
  std::string message;
};

[[noreturn]] void fail(const Path& where, const std::string& what) {
  throw DecodeError{where.str() + ": " + what};
}

// Warnings, one line per distinct (path pattern, message): a newer writer's extra task field
// gives one line, not one per task.
class Warnings {
 public:
  void add(const Path& where, const std::string& what) {
    std::string pattern = where.str(true);
    const std::string id = pattern + '\n' + what;
    if (const auto it = index_.find(id); it != index_.end()) {
      ++entries_[it->second].count;
      return;
    }
    if (entries_.size() >= kMaxWarnings) {
      ++dropped_;
      return;
    }
    index_.emplace(id, entries_.size());
    entries_.push_back({std::move(pattern), where.str(), what, 1});
  }
  std::vector<std::string> take() const {
    std::vector<std::string> out;
    for (const Entry& e : entries_) {
      if (e.count == 1) out.push_back(e.first + ": " + e.what);
      else
        out.push_back(e.pattern + ": " + e.what + " (" + std::to_string(e.count) +
                      " times, first at " + e.first + ")");
    }
    if (dropped_ > 0) out.push_back(std::to_string(dropped_) + " more warnings not shown");
    return out;
  }

 private:
  struct Entry {
    std::string pattern, first, what;
    size_t count;
  };
  std::unordered_map<std::string, size_t> index_;
  std::vector<Entry> entries_;
  size_t dropped_ = 0;
};

std::string describe(const Value& v) {
  switch (v.type) {
    case Value::Type::Null: return "null";
    case Value::Type::Bool: return v.b ? "boolean true" : "boolean false";
    case Value::Type::Int: return "integer " + std::to_string(v.i);
    case Value::Type::BigInt:
      return "integer " + (v.s.size() <= kShortText ? v.s : v.s.substr(0, kShortText) + "...");
    case Value::Type::Real: {
      std::string s = "number ";
      append_double(s, v.d);
      return s;
    }
    case Value::Type::String: return "string " + quoted_short(v.s);
    case Value::Type::Array:
    case Value::Type::Streamed: return "array";
    case Value::Type::Object: return "object";
  }
  return "?";
}

int64_t get_int(const Value& v, const Path& p) {
  if (v.type == Value::Type::Int) return v.i;
  if (v.type == Value::Type::BigInt) fail(p, describe(v) + " is out of the int64 range");
  fail(p, "expected an integer, got " + describe(v));
}

double get_number(const Value& v, const Path& p) {
  if (v.type == Value::Type::Real) return v.d;
  if (v.type == Value::Type::Int) return static_cast<double>(v.i);
  if (v.type == Value::Type::BigInt) {
    const double d = std::strtod(v.s.c_str(), nullptr);
    if (!std::isfinite(d)) fail(p, describe(v) + " is out of the range of a double");
    return d;
  }
  fail(p, "expected a number, got " + describe(v));
}

bool get_bool(const Value& v, const Path& p) {
  if (v.type != Value::Type::Bool) fail(p, "expected a boolean, got " + describe(v));
  return v.b;
}

const std::string& get_string(const Value& v, const Path& p) {
  if (v.type != Value::Type::String) fail(p, "expected a string, got " + describe(v));
  return v.s;
}

const Members& get_object(const Value& v, const Path& p) {
  if (v.type != Value::Type::Object) fail(p, "expected an object, got " + describe(v));
  return *v.m;
}

const Members& get_array(const Value& v, const Path& p) {
  if (v.type != Value::Type::Array) fail(p, "expected an array, got " + describe(v));
  return *v.m;
}

std::vector<int64_t> get_int_list(const Value& v, const Path& p) {
  const Members& a = get_array(v, p);
  std::vector<int64_t> out;
  out.reserve(a.items.size());
  for (size_t i = 0; i < a.items.size(); ++i) out.push_back(get_int(a.items[i], p.child(i)));
  return out;
}

template <typename E>
E get_enum(const Value& v, const Path& p, std::string_view what,
           std::optional<E> (*parse)(std::string_view), int count) {
  const std::string& s = get_string(v, p);
  if (const std::optional<E> e = parse(s)) return *e;
  std::string msg = "unknown " + std::string(what) + " " + quoted_short(s) + " (expected one of ";
  for (int k = 0; k < count; ++k) {
    if (k > 0) msg += ", ";
    msg += name_of(static_cast<E>(k));
  }
  fail(p, msg + ")");
}

// An object's members, each read at most once; finish() reports the ones nobody asked for.
class Fields {
 public:
  Fields(const Value& v, const Path& path, Warnings& warnings)
      : m_(get_object(v, path)), path_(path), warnings_(warnings), used_(m_.keys.size(), false) {}

  const Value* opt(std::string_view key) {
    for (size_t k = 0; k < m_.keys.size(); ++k)
      if (m_.keys[k] == key) {
        used_[k] = true;
        return &m_.items[k];
      }
    return nullptr;
  }
  const Value& req(std::string_view key) {
    if (const Value* v = opt(key)) return *v;
    fail(path_, "missing required field " + quoted_short(key));
  }
  void finish() {
    for (size_t k = 0; k < used_.size(); ++k)
      if (!used_[k])
        warnings_.add(path_, "unknown field " + quoted_short(m_.keys[k]) +
                                 " dropped (not in this version of the format)");
  }

 private:
  const Members& m_;
  const Path& path_;
  Warnings& warnings_;
  std::vector<bool> used_;
};

int64_t opt_int(Fields& f, const Path& path, std::string_view key, int64_t fallback) {
  const Value* v = f.opt(key);
  return v ? get_int(*v, path.child(key)) : fallback;
}

std::string opt_string(Fields& f, const Path& path, std::string_view key) {
  const Value* v = f.opt(key);
  return v ? get_string(*v, path.child(key)) : std::string();
}

Buffer decode_buffer(const Value& v, const Path& path, Warnings& warnings) {
  Fields f(v, path, warnings);
  Buffer b;
  b.id = get_int(f.req("id"), path.child("id"));
  b.name = get_string(f.req("name"), path.child("name"));
  b.kind = get_enum<BufferKind>(f.req("kind"), path.child("kind"), "kind", parse_buffer_kind,
                                kNumBufferKinds);
  b.dtype = get_enum<DType>(f.req("dtype"), path.child("dtype"), "dtype", parse_dtype, kNumDTypes);
  b.shape = get_int_list(f.req("shape"), path.child("shape"));
  if (const Value* s = f.opt("space"))
    b.space = get_enum<MemSpace>(*s, path.child("space"), "space", parse_memspace, kNumMemSpaces);
  if (const Value* s = f.opt("source"); s && s->type != Value::Type::Null) {
    if (s->type != Value::Type::String)
      fail(path.child("source"), "expected a string or null, got " + describe(*s));
    b.source = s->s;
  }
  if (const Value* s = f.opt("source_box"); s && s->type != Value::Type::Null) {
    const std::vector<int64_t> box = get_int_list(*s, path.child("source_box"));
    if (box.size() != 4)
      fail(path.child("source_box"),
           "expected [row0, rows, col0, cols], got " + std::to_string(box.size()) + " numbers");
    b.source_box = SourceBox{box[0], box[1], box[2], box[3]};
  }
  f.finish();
  return b;
}

Counter decode_counter(const Value& v, const Path& path, Warnings& warnings) {
  Fields f(v, path, warnings);
  Counter c;
  c.id = get_int(f.req("id"), path.child("id"));
  c.init = opt_int(f, path, "init", 0);
  c.note = opt_string(f, path, "note");
  f.finish();
  return c;
}

// Integral JSON numbers are Int (Other when beyond int64), numbers written with a fraction or
// exponent are Real, anything else is kept as JSON text for validate() to judge.
ParamValue decode_param(const Value& v) {
  switch (v.type) {
    case Value::Type::Int: return ParamValue::integer(v.i);
    case Value::Type::Real: return ParamValue::real(v.d);
    case Value::Type::BigInt: return ParamValue::other(v.s);
    default: return ParamValue::other(compact(v));
  }
}

Task decode_task(const Value& v, const Path& path, Warnings& warnings) {
  Fields f(v, path, warnings);
  Task t;
  t.id = get_int(f.req("id"), path.child("id"));
  t.op = get_enum<Op>(f.req("op"), path.child("op"), "op", parse_op, kNumOps);
  t.inputs = get_int_list(f.req("inputs"), path.child("inputs"));
  t.outputs = get_int_list(f.req("outputs"), path.child("outputs"));
  t.out_counter = get_int(f.req("out_counter"), path.child("out_counter"));
  if (const Value* ws = f.opt("waits")) {
    const Path wp = path.child("waits");
    const Members& a = get_array(*ws, wp);
    t.waits.reserve(a.items.size());
    for (size_t i = 0; i < a.items.size(); ++i) {
      const Path ep = wp.child(i);
      Fields wf(a.items[i], ep, warnings);
      Wait w;
      w.counter = get_int(wf.req("counter"), ep.child("counter"));
      w.threshold = get_int(wf.req("threshold"), ep.child("threshold"));
      wf.finish();
      t.waits.push_back(w);
    }
  }
  if (const Value* ps = f.opt("params")) {
    const Members& o = get_object(*ps, path.child("params"));
    for (size_t k = 0; k < o.items.size(); ++k) t.params.set(o.keys[k], decode_param(o.items[k]));
  }
  if (const Value* sm = f.opt("sm"); sm && sm->type != Value::Type::Null) {
    if (sm->type != Value::Type::Int && sm->type != Value::Type::BigInt)
      fail(path.child("sm"), "expected an integer or null, got " + describe(*sm));
    t.sm = get_int(*sm, path.child("sm"));
  }
  t.est_bytes = opt_int(f, path, "est_bytes", 0);
  t.est_flops = opt_int(f, path, "est_flops", 0);
  t.label = opt_string(f, path, "label");
  f.finish();
  return t;
}

GpuTarget decode_target(const Value& v, const Path& path, Warnings& warnings) {
  Fields f(v, path, warnings);
  GpuTarget t;
  const auto req_int = [&](std::string_view key) { return get_int(f.req(key), path.child(key)); };
  const auto req_number = [&](std::string_view key) {
    return get_number(f.req(key), path.child(key));
  };
  const auto opt_number = [&](std::string_view key, double fallback) {
    const Value* x = f.opt(key);
    return x ? get_number(*x, path.child(key)) : fallback;
  };
  const auto opt_bool = [&](std::string_view key, bool fallback) {
    const Value* x = f.opt(key);
    return x ? get_bool(*x, path.child(key)) : fallback;
  };
  t.name = get_string(f.req("name"), path.child("name"));
  t.sm_arch = req_int("sm_arch");
  t.num_sms = req_int("num_sms");
  t.smem_bytes_per_sm = req_int("smem_bytes_per_sm");
  t.smem_bytes_per_block_optin = req_int("smem_bytes_per_block_optin");
  t.regs_per_sm = req_int("regs_per_sm");
  t.max_threads_per_sm = req_int("max_threads_per_sm");
  t.max_regs_per_thread = req_int("max_regs_per_thread");
  t.l2_bytes = req_int("l2_bytes");
  t.hbm_bytes = req_int("hbm_bytes");
  t.hbm_bandwidth_gbs = req_number("hbm_bandwidth_gbs");
  t.fp16_tflops = req_number("fp16_tflops");
  t.clock_ghz = opt_number("clock_ghz", 0.0);
  t.supports_cooperative = opt_bool("supports_cooperative", true);
  t.wddm_tdr = opt_bool("wddm_tdr", false);
  t.measured_bw_gbs = opt_number("measured_bw_gbs", 0.0);
  t.note = opt_string(f, path, "note");
  f.finish();
  return t;
}

// {"<int>": int} maps: PageAllocation.buffer_to_page and an explicit sm_assignment.
std::vector<std::pair<int64_t, int64_t>> decode_int_map(const Value& v, const Path& path,
                                                        std::string_view what) {
  const Members& o = get_object(v, path);
  std::vector<std::pair<int64_t, int64_t>> out;
  out.reserve(o.items.size());
  std::unordered_set<int64_t> seen;
  for (size_t k = 0; k < o.items.size(); ++k) {
    const Path kp = path.child(o.keys[k]);
    int64_t id = 0;
    if (!parse_int_key(o.keys[k], &id))
      fail(kp, "key " + quoted_short(o.keys[k]) + " is not a " + std::string(what) +
                   " id (an integer written as a string, e.g. \"3\")");
    if (!seen.insert(id).second)
      fail(kp, std::string(what) + " " + std::to_string(id) + " appears twice");
    out.emplace_back(id, get_int(o.items[k], kp));
  }
  return out;
}

PageAllocation decode_pages(const Value& v, const Path& path, Warnings& warnings) {
  Fields f(v, path, warnings);
  PageAllocation pa;
  pa.buffer_to_page = decode_int_map(f.req("buffer_to_page"), path.child("buffer_to_page"),
                                     "buffer");
  const Path pp = path.child("pages");
  const Members& a = get_array(f.req("pages"), pp);
  for (size_t i = 0; i < a.items.size(); ++i) {
    const Path ep = pp.child(i);
    Fields pf(a.items[i], ep, warnings);
    Page p;
    p.id = get_int(pf.req("id"), ep.child("id"));
    p.space = get_enum<MemSpace>(pf.req("space"), ep.child("space"), "space", parse_memspace,
                                 kNumMemSpaces);
    p.nbytes = get_int(pf.req("nbytes"), ep.child("nbytes"));
    p.live_start = opt_int(pf, ep, "live_start", -1);
    p.live_end = opt_int(pf, ep, "live_end", -1);
    pf.finish();
    pa.pages.push_back(p);
  }
  f.finish();
  return pa;
}

ScheduleConfig decode_config(const Value& v, const Path& path, Warnings& warnings) {
  Fields f(v, path, warnings);
  ScheduleConfig c;
  if (const Value* t = f.opt("tiling")) {
    const Path tp = path.child("tiling");
    const Members& o = get_object(*t, tp);
    for (size_t k = 0; k < o.items.size(); ++k) {
      const Path ap = tp.child(o.keys[k]);
      const Members& sizes = get_object(o.items[k], ap);
      ScheduleConfig::TileSizes ts;
      for (size_t j = 0; j < sizes.items.size(); ++j)
        ts.emplace_back(sizes.keys[j], get_int(sizes.items[j], ap.child(sizes.keys[j])));
      c.tiling.emplace_back(o.keys[k], std::move(ts));
    }
  }
  if (const Value* g = f.opt("fusion_grouping")) {
    const Path gp = path.child("fusion_grouping");
    const Members& groups = get_array(*g, gp);
    for (size_t i = 0; i < groups.items.size(); ++i) {
      const Path ip = gp.child(i);
      const Members& names = get_array(groups.items[i], ip);
      std::vector<std::string> group;
      for (size_t j = 0; j < names.items.size(); ++j)
        group.push_back(get_string(names.items[j], ip.child(j)));
      c.fusion_grouping.push_back(std::move(group));
    }
  }
  if (const Value* s = f.opt("sm_assignment")) {
    const Path sp = path.child("sm_assignment");
    if (s->type == Value::Type::String) c.sm_assignment = s->s;
    else if (s->type == Value::Type::Object) c.sm_assignment = decode_int_map(*s, sp, "task");
    else fail(sp, "expected a string or an object, got " + describe(*s));
  }
  c.pipelining_depth = opt_int(f, path, "pipelining_depth", c.pipelining_depth);
  if (const Value* p = f.opt("page_allocation"))
    c.page_allocation = get_string(*p, path.child("page_allocation"));
  c.threads_per_block = opt_int(f, path, "threads_per_block", c.threads_per_block);
  c.smem_bytes_per_block = opt_int(f, path, "smem_bytes_per_block", c.smem_bytes_per_block);
  c.stream_chunk_bytes = opt_int(f, path, "stream_chunk_bytes", c.stream_chunk_bytes);
  c.stream_bytes_in_flight = opt_int(f, path, "stream_bytes_in_flight", c.stream_bytes_in_flight);
  c.stream_prefetch_bytes_in_flight =
      opt_int(f, path, "stream_prefetch_bytes_in_flight", c.stream_prefetch_bytes_in_flight);
  f.finish();
  return c;
}

// The reference reads target/pages/config with `if d.get(...)`, so {} means absent there too.
template <typename T, typename Decode>
std::optional<T> decode_nullable(Fields& top, const Path& root, std::string_view key,
                                 Warnings& warnings, Decode decode) {
  const Value* v = top.opt(key);
  if (!v || v->type == Value::Type::Null) return std::nullopt;
  const Path p = root.child(key);
  if (v->type != Value::Type::Object) fail(p, "expected an object or null, got " + describe(*v));
  if (v->size() == 0) {
    warnings.add(p, "empty object read as null (as the reference reader does)");
    return std::nullopt;
  }
  return decode(*v, p, warnings);
}

std::optional<long> parse_component(std::string_view s) {
  long x = 0;
  const auto res = std::from_chars(s.data(), s.data() + s.size(), x);
  if (res.ec != std::errc() || res.ptr != s.data() + s.size()) return std::nullopt;
  return x;
}

// The major and minor parts of a version "MAJOR.MINOR[.PATCH]" (minor empty when absent).
std::string_view version_major(std::string_view s) { return s.substr(0, s.find('.')); }
std::string_view version_minor(std::string_view s) {
  const size_t dot = s.find('.');
  if (dot == std::string_view::npos) return {};
  s.remove_prefix(dot + 1);
  return s.substr(0, s.find('.'));
}

std::string decode_version(const Value* v, const Path& p, std::string_view ours,
                           std::string_view what, Warnings& warnings) {
  if (!v) return std::string(ours);
  const std::string& file = get_string(*v, p);
  const std::string shown = printable(file.substr(0, kShortText));
  if (version_major(file) != version_major(ours))
    fail(p, std::string(what) + " major version mismatch: file " + shown + ", this build reads " +
                std::string(version_major(ours)) + ".x");
  const std::optional<long> file_minor = parse_component(version_minor(file));
  const std::optional<long> our_minor = parse_component(version_minor(ours));
  if (!version_minor(file).empty() && !file_minor)
    warnings.add(p, std::string(what) + " version " + shown +
                        " has a minor part this build cannot compare; loading it as " +
                        std::string(ours));
  else if (file_minor && our_minor && *file_minor > *our_minor)
    warnings.add(p, "the file is " + std::string(what) + " " + shown +
                        ", newer than this build's " + std::string(ours) +
                        "; loading it (fields this build does not know are dropped with a "
                        "warning)");
  return file;
}

// Decodes the buffers/counters/tasks records as the parser completes them. After the first bad
// record the rest are skipped, but the parse goes on: a syntax error later in the file, or a
// major version mismatch anywhere, is the better message.
class RecordDecoder : public RecordSink {
 public:
  RecordDecoder(Program& program, Warnings& warnings) : program_(program), warnings_(warnings) {}
  void record(size_t array, size_t index, const Value& element) override {
    if (error_) return;
    const Path root;
    const Path ap = root.child(kRecordArrays[array]);
    const Path ep = ap.child(index);
    try {
      switch (array) {
        case 0: program_.buffers.push_back(decode_buffer(element, ep, warnings_)); break;
        case 1: program_.counters.push_back(decode_counter(element, ep, warnings_)); break;
        default: program_.tasks.push_back(decode_task(element, ep, warnings_)); break;
      }
    } catch (DecodeError& e) {
      error_ = std::move(e.message);
    }
  }
  const std::optional<std::string>& error() const { return error_; }

 private:
  Program& program_;
  Warnings& warnings_;
  std::optional<std::string> error_;
};

// Before IR 0.8.0 a KV cache was [max_seq, n_kv_heads, head_dim]; since, each KV head's history
// is contiguous, [n_kv_heads, max_seq, head_dim] (amk/ir.h kv_cache_offset). A cache holds
// state, never file data, so an older file's caches are read in the new layout by swapping
// their first two dimensions: the program computes what it computed before. A program so
// upgraded carries this build's version: written out and read again it must not be swapped
// back (found by fuzz_json, a 0.05.0 file).
void upgrade_kv_cache_layout(Program& prog, const Path& root, Warnings& warnings) {
  // Another major version was refused already; an unreadable minor loads as this build's.
  if (version_major(prog.ir_version) != "0") return;
  const std::optional<long> minor = parse_component(version_minor(prog.ir_version));
  if (!minor || *minor >= 8) return;
  const Path buffers = root.child("buffers");
  bool upgraded = false;
  for (size_t i = 0; i < prog.buffers.size(); ++i) {
    Buffer& b = prog.buffers[i];
    if (b.kind != BufferKind::KV_CACHE || b.shape.size() != 3) continue;
    std::swap(b.shape[0], b.shape[1]);
    warnings.add(buffers.child(i).child("shape"),
                 "IR " + printable(prog.ir_version.substr(0, kShortText)) +
                     " KV caches are [max_seq, n_kv_heads, head_dim]; read as [n_kv_heads, "
                     "max_seq, head_dim] (IR 0.8.0)");
    upgraded = true;
  }
  if (upgraded) prog.ir_version = std::string(kIrVersion);
}

void decode_program(const Value& root_value, Program& prog, const RecordDecoder& records,
                    Warnings& warnings) {
  const Path root;
  Fields top(root_value, root, warnings);
  prog.ir_version =
      decode_version(top.opt("ir_version"), root.child("ir_version"), kIrVersion, "IR", warnings);
  prog.abi_version = decode_version(top.opt("abi_version"), root.child("abi_version"), kAbiVersion,
                                    "ABI", warnings);
  if (records.error()) throw DecodeError{*records.error()};
  upgrade_kv_cache_layout(prog, root, warnings);
  if (const Value* m = top.opt("meta")) {
    const Path mp = root.child("meta");
    const Members& o = get_object(*m, mp);
    prog.meta.reserve(o.items.size());
    for (size_t k = 0; k < o.items.size(); ++k)
      prog.meta.emplace_back(o.keys[k], compact(o.items[k]));
  }
  prog.target = decode_nullable<GpuTarget>(top, root, "target", warnings, decode_target);
  for (std::string_view name : kRecordArrays) {
    // A record array is Streamed (already decoded) whenever it is an array at all.
    const Value* v = top.opt(name);
    if (v && v->type != Value::Type::Streamed)
      fail(root.child(name), "expected an array, got " + describe(*v));
  }
  prog.pages = decode_nullable<PageAllocation>(top, root, "pages", warnings, decode_pages);
  prog.config = decode_nullable<ScheduleConfig>(top, root, "config", warnings, decode_config);
  top.finish();
}

bool is_json_string(const Value& v) { return v.type == Value::Type::String; }
}  // namespace
}  // namespace json_detail

using namespace json_detail;

// ---- public API -------------------------------------------------------------------------------

LoadResult program_from_json(std::string_view text) {
  LoadResult result;
  try {
    Warnings warnings;
    Program prog;
    RecordDecoder records(prog, warnings);
    Parsed parsed = parse_document(text, kMaxDepth, &records);
    if (!parsed.ok) {
      result.error = std::move(parsed.error);
      return result;
    }
    if (parsed.root.type != Value::Type::Object)
      fail(Path{}, "expected an object, got " + describe(parsed.root));
    decode_program(parsed.root, prog, records, warnings);
    result.program = std::move(prog);
    result.warnings = warnings.take();
  } catch (const DecodeError& e) {
    result.error = e.message;
  } catch (const std::bad_alloc&) {
    result.error = "out of memory while loading the program";
  }
  return result;
}

LoadResult load_program(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  LoadResult result;
  const std::string shown = path.string();
  const auto fail_with = [&](const std::string& why) {
    result.error = "cannot load program " + shown + ": " + why;
    return result;
  };
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) return fail_with("no such file");
  if (ec) return fail_with(ec.message());
  if (fs::is_directory(st)) return fail_with("is a directory, not a file");
  if (fs::is_regular_file(st)) {
    const uintmax_t size = fs::file_size(path, ec);
    if (!ec && size > kMaxFileBytes)
      return fail_with("the file is " + std::to_string(size) +
                       " bytes; programs over 1 GiB are refused");
  }
  std::FILE* f = std::fopen(shown.c_str(), "rb");
  if (!f) return fail_with(std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  size_t n = 0;
  // Read to EOF rather than trusting the size: pipes and growing files have none.
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    if (text.size() + n > kMaxFileBytes) {
      std::fclose(f);
      return fail_with("more than 1 GiB of input; programs over 1 GiB are refused");
    }
    text.append(buf, n);
  }
  const bool read_error = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (read_error) return fail_with(std::string("read error: ") + std::strerror(err));
  result = program_from_json(text);
  if (!result) result.error = shown + ": " + result.error;
  return result;
}
std::optional<std::string> Program::meta_string(std::string_view key) const {
  for (const auto& [k, text] : meta) {
    if (k != key) continue;
    Parsed p = parse_document(text, kMetaValueDepth, nullptr);
    if (!p.ok || !is_json_string(p.root)) return std::nullopt;
    return std::move(p.root.s);
  }
  return std::nullopt;
}
}  // namespace amk
