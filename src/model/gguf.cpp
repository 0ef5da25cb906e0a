// The GGUF reader: header, metadata and tensor-info validation, typed metadata reads, and the
// read-only mapping.
#include "amk/gguf.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "model/mapped_file.h"
#include "model/strict_json.h"

namespace amk {

// Values and tensor data are little-endian and read in place.
static_assert(std::endian::native == std::endian::little, "AMK reads GGUF in place");

namespace {

using model_detail::quote_name;

struct ValueTypeInfo {
  GgufType type;
  std::string_view name;
  uint64_t size;  // 0: variable (string, array)
};
constexpr std::array<ValueTypeInfo, 13> kValueTypes = {{
    {GgufType::U8, "uint8", 1},     {GgufType::I8, "int8", 1},      {GgufType::U16, "uint16", 2},
    {GgufType::I16, "int16", 2},    {GgufType::U32, "uint32", 4},   {GgufType::I32, "int32", 4},
    {GgufType::F32, "float32", 4},  {GgufType::BOOL, "bool", 1},    {GgufType::STRING, "string", 0},
    {GgufType::ARRAY, "array", 0},  {GgufType::U64, "uint64", 8},   {GgufType::I64, "int64", 8},
    {GgufType::F64, "float64", 8},
}};

uint64_t fixed_size(GgufType t) { return kValueTypes[static_cast<uint32_t>(t)].size; }

bool is_integer(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16:
    case GgufType::U32: case GgufType::I32: case GgufType::U64: case GgufType::I64:
      return true;
    default:
      return false;
  }
}

struct TensorTypeInfo {
  GgmlType type;
  std::string_view name;
  int64_t block_elements;
  int64_t block_bytes;
};
// Block layouts as ggml defines them (QK_K = 256 for the K-quants).
constexpr std::array<TensorTypeInfo, 32> kTensorTypes = {{
    {GgmlType::F32, "F32", 1, 4},          {GgmlType::F16, "F16", 1, 2},
    {GgmlType::Q4_0, "Q4_0", 32, 18},      {GgmlType::Q4_1, "Q4_1", 32, 20},
    {GgmlType::Q5_0, "Q5_0", 32, 22},      {GgmlType::Q5_1, "Q5_1", 32, 24},
    {GgmlType::Q8_0, "Q8_0", 32, 34},      {GgmlType::Q8_1, "Q8_1", 32, 40},
    {GgmlType::Q2_K, "Q2_K", 256, 84},     {GgmlType::Q3_K, "Q3_K", 256, 110},
    {GgmlType::Q4_K, "Q4_K", 256, 144},    {GgmlType::Q5_K, "Q5_K", 256, 176},
    {GgmlType::Q6_K, "Q6_K", 256, 210},    {GgmlType::Q8_K, "Q8_K", 256, 292},
    {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66}, {GgmlType::IQ2_XS, "IQ2_XS", 256, 74},
    {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98}, {GgmlType::IQ1_S, "IQ1_S", 256, 50},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 18},  {GgmlType::IQ3_S, "IQ3_S", 256, 110},
    {GgmlType::IQ2_S, "IQ2_S", 256, 82},   {GgmlType::IQ4_XS, "IQ4_XS", 256, 136},
    {GgmlType::I8, "I8", 1, 1},            {GgmlType::I16, "I16", 1, 2},
    {GgmlType::I32, "I32", 1, 4},          {GgmlType::I64, "I64", 1, 8},
    {GgmlType::F64, "F64", 1, 8},          {GgmlType::IQ1_M, "IQ1_M", 256, 56},
    {GgmlType::BF16, "BF16", 1, 2},        {GgmlType::TQ1_0, "TQ1_0", 256, 54},
    {GgmlType::TQ2_0, "TQ2_0", 256, 66},   {GgmlType::MXFP4, "MXFP4", 32, 17},
}};

const TensorTypeInfo* tensor_type_info(GgmlType t) {
  for (const TensorTypeInfo& i : kTensorTypes)
    if (i.type == t) return &i;
  return nullptr;
}

template <class T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // nothing in a GGUF file is aligned for us
  return v;
}

std::string dims_text(const std::vector<int64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

}  // namespace

std::string_view name_of(GgufType t) {
  const auto i = static_cast<uint32_t>(t);
  return i < kValueTypes.size() ? kValueTypes[i].name : std::string_view("<invalid>");
}

std::string_view name_of(GgmlType t) {
  const TensorTypeInfo* i = tensor_type_info(t);
  return i ? i->name : std::string_view("<invalid>");
}

std::optional<GgmlType> ggml_type_from_id(uint32_t id) {
  for (const TensorTypeInfo& i : kTensorTypes)
    if (static_cast<uint32_t>(i.type) == id) return i.type;
  return std::nullopt;
}

int64_t ggml_block_elements(GgmlType t) {
  const TensorTypeInfo* i = tensor_type_info(t);
  return i ? i->block_elements : 1;
}

int64_t ggml_block_bytes(GgmlType t) {
  const TensorTypeInfo* i = tensor_type_info(t);
  return i ? i->block_bytes : 1;
}

// ---- the parser ---------------------------------------------------------------------------------

// A cursor over untrusted bytes: every read is checked against what remains. Also decodes the
// elements of an already-checked array (GgufValue::elements), so there is one decoder.
struct GgufParser {
  std::span<const std::byte> bytes;
  std::string_view file;
  uint64_t pos = 0;

  [[noreturn]] void fail(std::string_view what) const {
    throw GgufError(fmt::format("{}: {}", file, what));
  }
  uint64_t remaining() const { return bytes.size() - pos; }

  std::span<const std::byte> take(uint64_t n, std::string_view what) {
    if (n > remaining())
      fail(fmt::format("truncated: {} needs {} bytes at offset {}, but the file has {} left", what,
                       n, pos, remaining()));
    const auto out = bytes.subspan(pos, n);
    pos += n;
    return out;
  }
  template <class T>
  T read(std::string_view what) {
    return load<T>(take(sizeof(T), what).data());
  }

  std::string_view read_string(std::string_view what, uint64_t max_bytes) {
    const uint64_t n = read<uint64_t>(what);
    if (n > max_bytes)
      fail(fmt::format("{} is {} bytes long, over the {}-byte limit", what, n, max_bytes));
    const auto s = take(n, what);
    return {reinterpret_cast<const char*>(s.data()), s.size()};
  }

  GgufType read_type(std::string_view what) {
    const auto id = read<uint32_t>(what);
    if (id >= kValueTypes.size())
      fail(fmt::format("{} has unknown value type {} (GGUF defines 0 to {})", what, id,
                       kValueTypes.size() - 1));
    return static_cast<GgufType>(id);
  }

  // A value of type `t` (its tag already read). `what` names it in messages.
  GgufValue read_value(GgufType t, const std::string& what, int depth) {
    GgufValue v;
    v.type_ = t;
    if (const uint64_t size = fixed_size(t)) {
      v.bytes_ = take(size, what);
      if (t == GgufType::BOOL && static_cast<uint8_t>(v.bytes_[0]) > 1)
        fail(fmt::format("{} is a bool holding {}, not 0 or 1", what,
                         static_cast<unsigned>(v.bytes_[0])));
      return v;
    }
    if (t == GgufType::STRING) {
      const std::string_view s = read_string(what, kMaxGgufStringBytes);
      v.bytes_ = std::as_bytes(std::span(s.data(), s.size()));
      return v;
    }
    // An array: element type, count, elements.
    if (depth >= kMaxGgufArrayDepth)
      fail(fmt::format("{} nests arrays deeper than the limit of {}", what, kMaxGgufArrayDepth));
    v.element_type_ = read_type(what + " (array element type)");
    v.count_ = read<uint64_t>(what + " (array length)");
    const uint64_t start = pos;
    // Each element takes at least this many bytes, so a count the file cannot hold is refused
    // before any loop runs for it.
    const uint64_t min_size = fixed_size(v.element_type_) ? fixed_size(v.element_type_)
                              : v.element_type_ == GgufType::STRING ? 8 : 12;
    if (v.count_ > remaining() / min_size)
      fail(fmt::format("truncated: {} declares {} elements of type {}, but the file has {} bytes "
                       "left",
                       what, v.count_, name_of(v.element_type_), remaining()));
    if (fixed_size(v.element_type_)) {
      v.bytes_ = take(v.count_ * min_size, what);
      if (v.element_type_ == GgufType::BOOL)
        for (uint64_t i = 0; i < v.count_; ++i)
          if (static_cast<uint8_t>(v.bytes_[i]) > 1)
            fail(fmt::format("{} element {} is a bool holding {}, not 0 or 1", what, i,
                             static_cast<unsigned>(v.bytes_[i])));
      return v;
    }
    for (uint64_t i = 0; i < v.count_; ++i) {
      const std::string element = fmt::format("{}[{}]", what, i);
      if (v.element_type_ == GgufType::STRING) {
        read_string(element, kMaxGgufStringBytes);
      } else {
        read_value(GgufType::ARRAY, element, depth + 1);
      }
    }
    v.bytes_ = bytes.subspan(start, pos - start);
    return v;
  }
};

// ---- GgufValue ----------------------------------------------------------------------------------

std::string GgufValue::type_text() const {
  if (type_ != GgufType::ARRAY) return std::string(name_of(type_));
  std::string out = fmt::format("array of {}", name_of(element_type_));
  if (element_type_ == GgufType::ARRAY && count_ > 0) {
    const std::vector<GgufValue> first = elements();
    out = "array of " + first[0].type_text();
  }
  return out;
}

std::optional<int64_t> GgufValue::as_int() const {
  const std::byte* p = bytes_.data();
  switch (type_) {
    case GgufType::U8: return load<uint8_t>(p);
    case GgufType::I8: return load<int8_t>(p);
    case GgufType::U16: return load<uint16_t>(p);
    case GgufType::I16: return load<int16_t>(p);
    case GgufType::U32: return load<uint32_t>(p);
    case GgufType::I32: return load<int32_t>(p);
    case GgufType::I64: return load<int64_t>(p);
    case GgufType::U64: {
      const auto u = load<uint64_t>(p);
      if (u > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(u);
    }
    default: return std::nullopt;
  }
}

std::optional<double> GgufValue::as_float() const {
  if (type_ == GgufType::F32) return load<float>(bytes_.data());
  if (type_ == GgufType::F64) return load<double>(bytes_.data());
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (type_ != GgufType::BOOL) return std::nullopt;
  return static_cast<uint8_t>(bytes_[0]) != 0;
}

std::optional<std::string_view> GgufValue::as_string() const {
  if (type_ != GgufType::STRING) return std::nullopt;
  return std::string_view(reinterpret_cast<const char*>(bytes_.data()), bytes_.size());
}

std::vector<GgufValue> GgufValue::elements() const {
  std::vector<GgufValue> out;
  if (type_ != GgufType::ARRAY) return out;
  out.reserve(static_cast<size_t>(count_));
  // The bytes were checked when the file was parsed; decoding them again cannot fail.
  GgufParser p{bytes_, "<array>"};
  for (uint64_t i = 0; i < count_; ++i) out.push_back(p.read_value(element_type_, "element", 1));
  return out;
}

// ---- GgufContents -------------------------------------------------------------------------------

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (const int64_t d : dims) n *= d;
  return n;
}

const GgufValue* GgufContents::find(std::string_view key) const {
  const auto it = std::lower_bound(metadata_by_key.begin(), metadata_by_key.end(), key,
                                   [&](uint32_t i, std::string_view k) { return metadata[i].key < k; });
  return it != metadata_by_key.end() && metadata[*it].key == key ? &metadata[*it].value : nullptr;
}

const GgufTensor* GgufContents::find_tensor(std::string_view name) const {
  const auto it = std::lower_bound(tensors_by_name.begin(), tensors_by_name.end(), name,
                                   [&](uint32_t i, std::string_view n) { return tensors[i].name < n; });
  return it != tensors_by_name.end() && tensors[*it].name == name ? &tensors[*it] : nullptr;
}

namespace {

[[noreturn]] void wrong_type(const GgufContents& c, std::string_view key, const GgufValue& v,
                             std::string_view wanted) {
  throw GgufError(fmt::format("{}: metadata {} has type {}, not {}", c.display_name,
                              quote_name(key), v.type_text(), wanted));
}

const GgufValue& required(const GgufContents& c, std::string_view key) {
  if (const GgufValue* v = c.find(key)) return *v;
  throw GgufError(fmt::format("{}: metadata {} is absent", c.display_name, quote_name(key)));
}

}  // namespace

std::string_view GgufContents::get_string(std::string_view key) const {
  const GgufValue& v = required(*this, key);
  if (const auto s = v.as_string()) return *s;
  wrong_type(*this, key, v, "a string");
}

int64_t GgufContents::get_int(std::string_view key) const {
  required(*this, key);
  return *opt_int(key);
}

double GgufContents::get_float(std::string_view key) const {
  const GgufValue& v = required(*this, key);
  if (const auto f = v.as_float()) return *f;
  wrong_type(*this, key, v, "a float32 or float64");
}

bool GgufContents::get_bool(std::string_view key) const {
  const GgufValue& v = required(*this, key);
  if (const auto b = v.as_bool()) return *b;
  wrong_type(*this, key, v, "a bool");
}

std::optional<std::string_view> GgufContents::opt_string(std::string_view key) const {
  if (!find(key)) return std::nullopt;
  return get_string(key);
}

std::optional<int64_t> GgufContents::opt_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!is_integer(v->type())) wrong_type(*this, key, *v, "an integer");
  if (const auto i = v->as_int()) return *i;
  throw GgufError(fmt::format("{}: metadata {} is a uint64 beyond the int64 range", display_name,
                              quote_name(key)));
}

std::optional<double> GgufContents::opt_float(std::string_view key) const {
  if (!find(key)) return std::nullopt;
  return get_float(key);
}

std::optional<bool> GgufContents::opt_bool(std::string_view key) const {
  if (!find(key)) return std::nullopt;
  return get_bool(key);
}

std::vector<std::string_view> GgufContents::get_strings(std::string_view key) const {
  const GgufValue& v = required(*this, key);
  if (v.type() != GgufType::ARRAY || v.element_type() != GgufType::STRING)
    wrong_type(*this, key, v, "an array of string");
  std::vector<std::string_view> out;
  out.reserve(static_cast<size_t>(v.size()));
  for (const GgufValue& e : v.elements()) out.push_back(*e.as_string());
  return out;
}

std::vector<int64_t> GgufContents::get_ints(std::string_view key) const {
  const GgufValue& v = required(*this, key);
  if (v.type() != GgufType::ARRAY || !is_integer(v.element_type()))
    wrong_type(*this, key, v, "an array of integers");
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(v.size()));
  for (const GgufValue& e : v.elements()) {
    const auto i = e.as_int();
    if (!i)
      throw GgufError(fmt::format("{}: metadata {} element {} is a uint64 beyond the int64 range",
                                  display_name, quote_name(key), out.size()));
    out.push_back(*i);
  }
  return out;
}

std::vector<double> GgufContents::get_floats(std::string_view key) const {
  const GgufValue& v = required(*this, key);
  if (v.type() != GgufType::ARRAY ||
      (v.element_type() != GgufType::F32 && v.element_type() != GgufType::F64))
    wrong_type(*this, key, v, "an array of float32 or float64");
  std::vector<double> out;
  out.reserve(static_cast<size_t>(v.size()));
  for (const GgufValue& e : v.elements()) out.push_back(*e.as_float());
  return out;
}

// ---- parse_gguf ---------------------------------------------------------------------------------

GgufContents parse_gguf(std::span<const std::byte> file, std::string_view display_name) {
  GgufContents out;
  out.display_name = std::string(display_name);
  GgufParser p{file, out.display_name};

  if (file.size() < 4)
    p.fail(fmt::format("truncated: {} bytes, but a GGUF file starts with the 4-byte magic 'GGUF'",
                       file.size()));
  const auto magic = p.take(4, "the magic");
  if (std::memcmp(magic.data(), "GGUF", 4) != 0)
    p.fail(fmt::format("bad magic {} (expected 'GGUF'): not a GGUF file",
                       quote_name({reinterpret_cast<const char*>(magic.data()), 4})));
  const auto version = p.read<uint32_t>("the version");
  if (version == 1)
    p.fail("GGUF version 1 (32-bit counts, 2023) is not supported; AMK reads versions 2 and 3 "
           "(re-convert the model with a current llama.cpp)");
  if (version != 2 && version != 3) {
    const uint32_t swapped = __builtin_bswap32(version);
    if (swapped >= 1 && swapped <= 3)
      p.fail(fmt::format("a big-endian GGUF file (version {} byte-swapped); AMK reads "
                         "little-endian files only",
                         swapped));
    p.fail(fmt::format("unsupported GGUF version {} (AMK reads versions 2 and 3)", version));
  }
  out.version = version;
  const auto n_tensors = p.read<uint64_t>("the tensor count");
  const auto n_kv = p.read<uint64_t>("the metadata count");
  if (n_tensors > kMaxGgufTensors)
    p.fail(fmt::format("tensor count {} exceeds the limit of {}", n_tensors, kMaxGgufTensors));
  if (n_kv > kMaxGgufMetadata)
    p.fail(fmt::format("metadata count {} exceeds the limit of {}", n_kv, kMaxGgufMetadata));

  // ---- metadata ----
  // Each key/value takes at least 8 (key length) + 4 (type) + 1 bytes: refuse a count the file
  // cannot hold before reserving for it.
  if (n_kv > p.remaining() / 13)
    p.fail(fmt::format("truncated: {} metadata entries declared, but the file has {} bytes left",
                       n_kv, p.remaining()));
  out.metadata.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string which = fmt::format("metadata entry {}", i);
    const std::string_view key = p.read_string(which + " key", kMaxGgufKeyBytes);
    if (key.empty()) p.fail(fmt::format("{} has an empty key", which));
    const std::string what = fmt::format("metadata {}", quote_name(key));
    const GgufType type = p.read_type(what);
    out.metadata.push_back({key, p.read_value(type, what, 0)});
  }
  out.metadata_by_key.resize(out.metadata.size());
  for (uint32_t i = 0; i < out.metadata.size(); ++i) out.metadata_by_key[i] = i;
  std::stable_sort(out.metadata_by_key.begin(), out.metadata_by_key.end(),
                   [&](uint32_t a, uint32_t b) { return out.metadata[a].key < out.metadata[b].key; });
  for (size_t i = 1; i < out.metadata_by_key.size(); ++i)
    if (out.metadata[out.metadata_by_key[i]].key == out.metadata[out.metadata_by_key[i - 1]].key)
      p.fail(fmt::format("duplicate metadata key {}",
                         quote_name(out.metadata[out.metadata_by_key[i]].key)));

  if (const GgufValue* a = out.find("general.alignment")) {
    if (a->type() != GgufType::U32)
      p.fail(fmt::format("general.alignment is {}, not a uint32", a->type_text()));
    const auto align = static_cast<uint64_t>(*a->as_int());
    if (align == 0 || !std::has_single_bit(align))
      p.fail(fmt::format("general.alignment {} is not a power of two", align));
    out.alignment = align;
  }

  // ---- tensor infos ----
  // Each takes at least 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset) bytes.
  if (n_tensors > p.remaining() / 24)
    p.fail(fmt::format("truncated: {} tensors declared, but the file has {} bytes left", n_tensors,
                       p.remaining()));
  out.tensors.reserve(static_cast<size_t>(n_tensors));
  std::vector<uint64_t> nbytes;
  nbytes.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = p.read_string(fmt::format("tensor {} name", i), kMaxGgufTensorNameBytes);
    if (t.name.empty()) p.fail(fmt::format("tensor {} has an empty name", i));
    const std::string tname = fmt::format("tensor {}", quote_name(t.name));
    const auto n_dims = p.read<uint32_t>(tname + " dimension count");
    if (n_dims > kMaxGgufDims)
      p.fail(fmt::format("{} has {} dimensions, more than ggml's {}", tname, n_dims, kMaxGgufDims));
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto dim = p.read<uint64_t>(tname + " dimensions");
      if (dim > uint64_t(std::numeric_limits<int64_t>::max()))
        p.fail(fmt::format("{} dimension {} is {}, beyond the int64 range", tname, d, dim));
      t.dims.push_back(static_cast<int64_t>(dim));
      if (__builtin_mul_overflow(numel, static_cast<int64_t>(dim), &numel))
        p.fail(fmt::format("{} dimensions {}...: the element count overflows", tname,
                           dims_text(t.dims)));
    }
    const auto type_id = p.read<uint32_t>(tname + " type");
    const auto type = ggml_type_from_id(type_id);
    if (!type) p.fail(fmt::format("{} has unknown tensor type {}", tname, type_id));
    t.type = *type;
    t.offset = p.read<uint64_t>(tname + " offset");
    // Blocks run along the innermost dimension: a row must be a whole number of them.
    const int64_t block = ggml_block_elements(t.type);
    const int64_t row = t.dims.empty() ? 1 : t.dims[0];
    if (row % block != 0)
      p.fail(fmt::format("{} is {} with dimensions {}: the first dimension {} is not a multiple of "
                         "the block size {}",
                         tname, name_of(t.type), dims_text(t.dims), row, block));
    int64_t size = 0;
    if (__builtin_mul_overflow(numel / block, ggml_block_bytes(t.type), &size))
      p.fail(fmt::format("{} dimensions {}: the byte size overflows", tname, dims_text(t.dims)));
    nbytes.push_back(static_cast<uint64_t>(size));
    out.tensors.push_back(std::move(t));
  }
  out.tensors_by_name.resize(out.tensors.size());
  for (uint32_t i = 0; i < out.tensors.size(); ++i) out.tensors_by_name[i] = i;
  std::stable_sort(out.tensors_by_name.begin(), out.tensors_by_name.end(),
                   [&](uint32_t a, uint32_t b) { return out.tensors[a].name < out.tensors[b].name; });
  for (size_t i = 1; i < out.tensors_by_name.size(); ++i)
    if (out.tensors[out.tensors_by_name[i]].name == out.tensors[out.tensors_by_name[i - 1]].name)
      p.fail(fmt::format("duplicate tensor name {}",
                         quote_name(out.tensors[out.tensors_by_name[i]].name)));

  // ---- the data section ----
  // It starts at the next multiple of the alignment; a file without tensor bytes may end first.
  const uint64_t size = file.size();
  uint64_t data_offset = 0;
  if (__builtin_add_overflow(p.pos, out.alignment - 1, &data_offset))
    p.fail("the data section offset overflows");
  data_offset -= data_offset % out.alignment;
  out.data_offset = data_offset;
  const uint64_t data_bytes = data_offset <= size ? size - data_offset : 0;
  for (size_t i = 0; i < out.tensors.size(); ++i) {
    GgufTensor& t = out.tensors[i];
    const std::string tname = fmt::format("tensor {}", quote_name(t.name));
    if (t.offset % out.alignment != 0)
      p.fail(fmt::format("{} offset {} is misaligned: not a multiple of the alignment {}", tname,
                         t.offset, out.alignment));
    if (t.offset > data_bytes || nbytes[i] > data_bytes - t.offset)
      p.fail(fmt::format("{} ({} {}, {} bytes at data offset {}) lies past the end of the file: the "
                         "data section holds {} bytes from file offset {}",
                         tname, name_of(t.type), dims_text(t.dims), nbytes[i], t.offset, data_bytes,
                         data_offset));
    t.data = file.subspan(static_cast<size_t>(data_offset + t.offset), static_cast<size_t>(nbytes[i]));
  }
  // Overlap: after sorting by offset, a range overlaps an earlier one exactly when it starts
  // before the furthest end seen so far. Empty tensors occupy no bytes.
  std::vector<size_t> by_offset;
  for (size_t i = 0; i < out.tensors.size(); ++i)
    if (nbytes[i] > 0) by_offset.push_back(i);
  std::sort(by_offset.begin(), by_offset.end(), [&](size_t a, size_t b) {
    return out.tensors[a].offset < out.tensors[b].offset;
  });
  const GgufTensor* furthest = nullptr;
  uint64_t furthest_end = 0;
  for (const size_t i : by_offset) {
    const GgufTensor& t = out.tensors[i];
    if (furthest && t.offset < furthest_end)
      p.fail(fmt::format("tensors {} and {} overlap in the data section (offsets {} and {})",
                         quote_name(furthest->name), quote_name(t.name), furthest->offset,
                         t.offset));
    if (!furthest || t.offset + nbytes[i] > furthest_end) {
      furthest = &t;
      furthest_end = t.offset + nbytes[i];
    }
  }
  return out;
}

// ---- the mapped file ----------------------------------------------------------------------------

struct GgufFile::State {
  model_detail::MappedFile file;
  GgufContents contents;
};

GgufFile::GgufFile(std::unique_ptr<State> state) : state_(std::move(state)) {}
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::filesystem::path& path) {
  auto state = std::make_unique<State>();
  const std::string name = path.string();
  std::string error;
  state->file = model_detail::MappedFile::map(path, &error);
  if (!error.empty()) throw GgufError(fmt::format("{}: {}", name, error));
  state->contents = parse_gguf(state->file.bytes(), name);
  return GgufFile(std::move(state));
}

const GgufContents& GgufFile::contents() const { return state_->contents; }

bool looks_like_gguf(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  char magic[4] = {};
  const ssize_t n = ::read(fd, magic, 4);
  ::close(fd);
  return n == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace amk
