// Internals shared by the JSON program reader (json_reader.cpp) and writer (json_writer.cpp):
// the small DOM the reader builds, its depth limits, and the text helpers both sides use. Not a
// public header.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace amk::json_detail {

// A program needs 5 levels (object, tasks, task, waits, wait); 64 leaves room for meta values
// while keeping every recursive walk (destruction included) shallow.
constexpr size_t kMaxDepth = 64;
// Meta values sit under 2 levels and param values under 4: stored values must stay loadable
// where the writer puts them back.
constexpr size_t kMetaValueDepth = kMaxDepth - 2;
constexpr size_t kParamValueDepth = kMaxDepth - 4;
// Strings quoted in messages are cut to this many bytes.
constexpr size_t kShortText = 48;

// ---- the DOM ----------------------------------------------------------------------------------

struct Value;
struct Members {
  std::vector<std::string> keys;  // objects only, parallel to items
  std::vector<Value> items;
};

struct Value {
  // BigInt: an integer literal outside int64, kept as its text. Streamed: a record array whose
  // elements went to the RecordSink as they completed.
  enum class Type : uint8_t { Null, Bool, Int, BigInt, Real, String, Array, Object, Streamed };
  Type type = Type::Null;
  bool b = false;
  int64_t i = 0;
  double d = 0.0;
  std::string s;  // String: the text; BigInt: the digits
  std::unique_ptr<Members> m;
  size_t size() const { return m ? m->items.size() : 0; }
};

constexpr std::array<std::string_view, 3> kRecordArrays = {"buffers", "counters", "tasks"};

// Receives each element of the top-level record arrays as soon as it is complete.
class RecordSink {
 public:
  virtual ~RecordSink() = default;
  virtual void record(size_t array, size_t index, const Value& element) = 0;
};

struct Parsed {
  bool ok = false;
  Value root;
  std::string error;
};

// json_reader.cpp: parses text into the DOM, refusing nesting deeper than max_depth, duplicate
// keys and more held values than a program needs; record arrays go to sink when it is not null.
Parsed parse_document(std::string_view text, size_t max_depth, RecordSink* sink);

// json_writer.cpp: a JSON string as json.dumps(ensure_ascii=True) writes it.
void append_quoted(std::string& out, std::string_view s);
std::string quoted(std::string_view s);
// json_writer.cpp: Python's repr(float).
void append_double(std::string& out, double d);
// json_writer.cpp: a value as json.dumps(separators=(",", ":")) writes it.
std::string compact(const Value& v);

}  // namespace amk::json_detail
