// The safetensors reader: header validation and the read-only mapping.
#include "amk/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "model/mapped_file.h"
#include "model/strict_json.h"

namespace amk {

// The data section is little-endian and read in place.
static_assert(std::endian::native == std::endian::little, "AMK reads safetensors in place");

namespace {

using model_detail::json_type_word;
using model_detail::quote_name;
using nlohmann::json;

struct DTypeInfo {
  StDType type;
  std::string_view name;
  int64_t size;
};
constexpr std::array<DTypeInfo, 12> kDTypes = {{
    {StDType::F64, "F64", 8},
    {StDType::F32, "F32", 4},
    {StDType::F16, "F16", 2},
    {StDType::BF16, "BF16", 2},
    {StDType::I64, "I64", 8},
    {StDType::I32, "I32", 4},
    {StDType::I16, "I16", 2},
    {StDType::I8, "I8", 1},
    {StDType::U8, "U8", 1},
    {StDType::BOOL, "BOOL", 1},
    {StDType::F8_E4M3, "F8_E4M3", 1},
    {StDType::F8_E5M2, "F8_E5M2", 1},
}};

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

template <class T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // views need not be aligned: the data section starts at 8 + N
  return v;
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in float.
    const float mag = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -mag : mag;
  }
  const uint32_t bits =
      exp == 0x1f ? (sign | 0x7f800000u | (mant << 13)) : (sign | ((exp + 112u) << 23) | (mant << 13));
  return std::bit_cast<float>(bits);
}

float bf16_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// A header failure: "<file>: <what>".
[[noreturn]] void fail(std::string_view file, std::string_view what) {
  throw SafetensorsError(fmt::format("{}: {}", file, what));
}

struct Entry {
  TensorView view;
  uint64_t begin = 0;
  uint64_t end = 0;
};

Entry parse_entry(std::string_view file, const std::string& name, const json& value,
                  uint64_t data_bytes) {
  const std::string tname = "tensor " + quote_name(name);
  if (name.empty()) fail(file, "a tensor has an empty name");
  if (!value.is_object())
    fail(file, fmt::format("{} must be an object with dtype, shape and data_offsets, got {}",
                           tname, json_type_word(value)));
  for (const auto& [key, _] : value.items())
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail(file, fmt::format("{} has an unknown field {}", tname, quote_name(key)));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!value.contains(key)) fail(file, fmt::format("{} has no '{}'", tname, key));

  Entry e;
  e.view.name = name;
  e.view.file = std::string(file);

  const json& dtype = value["dtype"];
  if (!dtype.is_string())
    fail(file, fmt::format("{} dtype must be a string, got {}", tname, json_type_word(dtype)));
  const auto parsed = parse_st_dtype(dtype.get_ref<const std::string&>());
  if (!parsed)
    fail(file, fmt::format("{} has unknown dtype {}", tname, quote_name(dtype.get_ref<const std::string&>())));
  e.view.dtype = *parsed;

  const json& shape = value["shape"];
  if (!shape.is_array())
    fail(file, fmt::format("{} shape must be an array, got {}", tname, json_type_word(shape)));
  int64_t numel = 1;
  for (const json& d : shape) {
    if (!d.is_number_integer())
      fail(file, fmt::format("{} shape {} holds {}, not an integer", tname, shape.dump(),
                             json_type_word(d)));
    if (d.is_number_unsigned() ? d.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())
                               : d.get<int64_t>() < 0)
      fail(file, fmt::format("{} shape {} has a {} dimension", tname, shape.dump(),
                             d.is_number_unsigned() ? "too large" : "negative"));
    const int64_t dim = d.get<int64_t>();
    if (__builtin_mul_overflow(numel, dim, &numel))
      fail(file, fmt::format("{} shape {}: the element count overflows", tname, shape.dump()));
    e.view.shape.push_back(dim);
  }
  int64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, itemsize(e.view.dtype), &nbytes))
    fail(file, fmt::format("{} shape {}: the byte size overflows", tname, shape.dump()));

  const json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    fail(file, fmt::format("{} data_offsets must be [begin, end] with non-negative integers, got {}",
                           tname, offsets.dump()));
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  const std::string range = fmt::format("data_offsets [{}, {}]", e.begin, e.end);
  if (e.begin > e.end) fail(file, fmt::format("{} {} end before they begin", tname, range));
  if (e.end > data_bytes)
    fail(file, fmt::format("{} {} past the end of the data section ({} bytes)", tname, range,
                           data_bytes));
  if (e.end - e.begin != static_cast<uint64_t>(nbytes))
    fail(file, fmt::format("{} {} {} needs {} bytes but {} span {}", tname, name_of(e.view.dtype),
                           shape_text(e.view.shape), nbytes, range, e.end - e.begin));
  return e;
}

std::vector<std::pair<std::string, std::string>> parse_metadata(std::string_view file,
                                                                const json& value) {
  if (!value.is_object())
    fail(file, fmt::format("__metadata__ must be an object of strings, got {}", json_type_word(value)));
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string())
      fail(file, fmt::format("__metadata__ value for {} must be a string, got {}", quote_name(key),
                             json_type_word(v)));
    out.emplace_back(key, v.get<std::string>());
  }
  return out;
}

}  // namespace

std::string_view name_of(StDType t) {
  for (const DTypeInfo& d : kDTypes)
    if (d.type == t) return d.name;
  return "<invalid>";
}

std::optional<StDType> parse_st_dtype(std::string_view name) {
  for (const DTypeInfo& d : kDTypes)
    if (d.name == name) return d.type;
  return std::nullopt;
}

int64_t itemsize(StDType t) {
  for (const DTypeInfo& d : kDTypes)
    if (d.type == t) return d.size;
  return 1;
}

// ---- TensorView ---------------------------------------------------------------------------------

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

namespace {
void check_index(const TensorView& v, int64_t i) {
  const int64_t n = v.numel();
  if (i < 0 || i >= n)
    throw SafetensorsError(fmt::format("{}: tensor {}: element {} is out of range ({} elements)",
                                       v.file, quote_name(v.name), i, n));
  if (static_cast<uint64_t>(n * itemsize(v.dtype)) != v.bytes.size())
    throw SafetensorsError(fmt::format("{}: tensor {}: view holds {} bytes, shape needs {}", v.file,
                                       quote_name(v.name), v.bytes.size(), n * itemsize(v.dtype)));
}
[[noreturn]] void wrong_kind(const TensorView& v, std::string_view as) {
  throw SafetensorsError(fmt::format("{}: tensor {} is {}, which cannot be read as {}", v.file,
                                     quote_name(v.name), name_of(v.dtype), as));
}
}  // namespace

double TensorView::float_at(int64_t i) const {
  check_index(*this, i);
  const std::byte* p = bytes.data() + i * itemsize(dtype);
  switch (dtype) {
    case StDType::F64: return load<double>(p);
    case StDType::F32: return load<float>(p);
    case StDType::F16: return f16_to_float(load<uint16_t>(p));
    case StDType::BF16: return bf16_to_float(load<uint16_t>(p));
    default: wrong_kind(*this, "a float");
  }
}

std::vector<float> TensorView::to_floats() const {
  switch (dtype) {
    case StDType::F64: case StDType::F32: case StDType::F16: case StDType::BF16: break;
    default: wrong_kind(*this, "floats");
  }
  const int64_t n = numel();
  std::vector<float> out(static_cast<size_t>(n));
  if (n == 0) return out;
  check_index(*this, 0);
  const std::byte* p = bytes.data();
  switch (dtype) {
    case StDType::F64:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<double>(p + 8 * i));
      break;
    case StDType::F32:
      std::memcpy(out.data(), p, static_cast<size_t>(n) * sizeof(float));
      break;
    case StDType::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_float(load<uint16_t>(p + 2 * i));
      break;
    case StDType::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(load<uint16_t>(p + 2 * i));
      break;
    default: wrong_kind(*this, "floats");
  }
  return out;
}

int64_t TensorView::int_at(int64_t i) const {
  check_index(*this, i);
  const std::byte* p = bytes.data() + i * itemsize(dtype);
  switch (dtype) {
    case StDType::I64: return load<int64_t>(p);
    case StDType::I32: return load<int32_t>(p);
    case StDType::I16: return load<int16_t>(p);
    case StDType::I8: return load<int8_t>(p);
    case StDType::U8: return load<uint8_t>(p);
    case StDType::BOOL: return load<uint8_t>(p) != 0;
    default: wrong_kind(*this, "an integer");
  }
}

std::vector<int64_t> TensorView::to_ints() const {
  switch (dtype) {
    case StDType::I64: case StDType::I32: case StDType::I16: case StDType::I8: case StDType::U8:
    case StDType::BOOL: break;
    default: wrong_kind(*this, "integers");
  }
  const int64_t n = numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = int_at(i);
  return out;
}

// ---- parsing ------------------------------------------------------------------------------------

const TensorView* SafetensorsContents::find(std::string_view name) const {
  const auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                                   [](const TensorView& t, std::string_view n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

SafetensorsContents parse_safetensors(std::span<const std::byte> file, std::string_view display_name) {
  const uint64_t size = file.size();
  if (size < 8)
    fail(display_name, fmt::format("truncated: {} bytes, but a safetensors file starts with an "
                                   "8-byte header length",
                                   size));
  const uint64_t n = load<uint64_t>(file.data());
  if (n > size - 8)
    fail(display_name, fmt::format("header length {} is past the end of the file ({} bytes after "
                                   "the length field); the file is truncated or not safetensors",
                                   n, size - 8));
  if (n > kMaxSafetensorsHeaderBytes)
    fail(display_name, fmt::format("header length {} exceeds the {}-byte limit", n,
                                   kMaxSafetensorsHeaderBytes));

  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), n);
  json doc;
  try {
    doc = model_detail::parse_untrusted_json(text);
  } catch (const std::runtime_error& e) {
    fail(display_name, fmt::format("header is {}", e.what()));
  }
  if (!doc.is_object())
    fail(display_name, fmt::format("header must be a JSON object, got {}", json_type_word(doc)));

  SafetensorsContents out;
  out.header_bytes = n;
  out.data_bytes = size - 8 - n;
  const std::span<const std::byte> data = file.subspan(8 + n);

  std::vector<Entry> entries;
  entries.reserve(doc.size());
  for (const auto& [key, value] : doc.items()) {
    if (key == "__metadata__") {
      out.metadata = parse_metadata(display_name, value);
      continue;
    }
    entries.push_back(parse_entry(display_name, key, value, out.data_bytes));
  }

  // Overlap check: after sorting by begin, a range overlaps an earlier one exactly when it
  // starts before the furthest end seen so far. Empty tensors occupy no bytes.
  std::vector<const Entry*> by_offset;
  for (const Entry& e : entries)
    if (e.end > e.begin) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  const Entry* furthest = nullptr;
  for (const Entry* e : by_offset) {
    if (furthest && e->begin < furthest->end)
      fail(display_name,
           fmt::format("tensors {} data_offsets [{}, {}] and {} data_offsets [{}, {}] overlap",
                       quote_name(furthest->view.name), furthest->begin, furthest->end,
                       quote_name(e->view.name), e->begin, e->end));
    if (!furthest || e->end > furthest->end) furthest = e;
  }

  out.tensors.reserve(entries.size());
  for (Entry& e : entries) {
    e.view.bytes = data.subspan(e.begin, e.end - e.begin);
    out.tensors.push_back(std::move(e.view));
  }
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const TensorView& a, const TensorView& b) { return a.name < b.name; });
  std::sort(out.metadata.begin(), out.metadata.end());
  return out;
}

// ---- the mapped file ----------------------------------------------------------------------------

struct SafetensorsFile::State {
  std::filesystem::path path;
  model_detail::MappedFile file;
  SafetensorsContents contents;
};

SafetensorsFile::SafetensorsFile(std::unique_ptr<State> state) : state_(std::move(state)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  auto state = std::make_unique<State>();
  state->path = path;
  const std::string name = path.string();

  std::string error;
  state->file = model_detail::MappedFile::map(path, &error);
  if (!error.empty()) fail(name, error);
  state->contents = parse_safetensors(state->file.bytes(), name);
  return SafetensorsFile(std::move(state));
}

const std::filesystem::path& SafetensorsFile::path() const { return state_->path; }
const std::vector<TensorView>& SafetensorsFile::tensors() const { return state_->contents.tensors; }
const std::vector<std::pair<std::string, std::string>>& SafetensorsFile::metadata() const {
  return state_->contents.metadata;
}
uint64_t SafetensorsFile::file_bytes() const { return state_->file.size(); }
const TensorView* SafetensorsFile::find(std::string_view name) const {
  return state_->contents.find(name);
}
const TensorView& SafetensorsFile::at(std::string_view name) const {
  if (const TensorView* t = find(name)) return *t;
  fail(state_->path.string(), fmt::format("missing tensor {}", quote_name(name)));
}

}  // namespace amk
