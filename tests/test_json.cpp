// The on-disk JSON format (IR_SPEC §6): what conforming tools write must load here, what we write
// must be what the reference writes, and nothing a file contains may crash the loader.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>

#include "amk/json.h"
#include "support/temp_dir.h"

namespace amk {
namespace {

namespace fs = std::filesystem;

std::string read_data(const std::string& name) {
  std::ifstream f(fs::path(AMK_TESTDATA_DIR) / "json" / name, std::ios::binary);
  EXPECT_TRUE(f.good()) << name;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

fs::path data_path(const std::string& name) { return fs::path(AMK_TESTDATA_DIR) / "json" / name; }

// A scratch directory per test, removed afterwards.
struct TempDir : amk::testing::TempDir {
  TempDir() : amk::testing::TempDir("json") {}
};

std::string load_error(std::string_view text) {
  const LoadResult r = program_from_json(text);
  EXPECT_FALSE(r) << "loaded unexpectedly: " << text.substr(0, 200);
  EXPECT_FALSE(r.error.empty());
  return r.error;
}

Program load_ok(std::string_view text) {
  LoadResult r = program_from_json(text);
  EXPECT_TRUE(r) << r.error;
  return r ? *r.program : Program{};
}

bool has_warning(const LoadResult& r, const std::string& needle) {
  for (const std::string& w : r.warnings)
    if (w.find(needle) != std::string::npos) return true;
  return false;
}

std::string join(const std::vector<std::string>& xs) {
  std::string out;
  for (const auto& x : xs) out += x + "\n";
  return out;
}

// A task list wrapped in a minimal program.
std::string with_tasks(const std::string& tasks) {
  return R"({"counters": [{"id": 0}], "tasks": [)" + tasks + "]}";
}

constexpr const char* kTask =
    R"({"id": 0, "op": "NOP", "inputs": [], "outputs": [], "out_counter": 0})";

// ---- the spec's example -----------------------------------------------------------------------

TEST(JsonSpecExample, PartialTargetIsRefusedNamingTheMissingField) {
  // §6's example elides most target fields with "...": "..."; those fields are required.
  const LoadResult r = program_from_json(read_data("spec_example.json"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error, "$.target: missing required field \"smem_bytes_per_sm\"");
}

TEST(JsonSpecExample, CompleteVariantLoadsEveryField) {
  const LoadResult r = program_from_json(read_data("spec_example_complete.json"));
  ASSERT_TRUE(r) << r.error;
  EXPECT_TRUE(r.warnings.empty()) << join(r.warnings);
  const Program& p = *r.program;
  EXPECT_EQ(p.ir_version, "0.2.0");
  EXPECT_EQ(p.abi_version, "0.2");
  EXPECT_EQ(p.meta_string("model"), "toy");
  EXPECT_EQ(p.meta_string("gpu"), "rtx5090");
  ASSERT_TRUE(p.target);
  EXPECT_EQ(p.target->name, "rtx5090");
  EXPECT_EQ(p.target->sm_arch, 120);
  EXPECT_EQ(p.target->hbm_bytes, int64_t{24} << 30);
  EXPECT_DOUBLE_EQ(p.target->hbm_bandwidth_gbs, 896.0);
  EXPECT_DOUBLE_EQ(p.target->clock_ghz, 1.597);
  EXPECT_TRUE(p.target->wddm_tdr);
  EXPECT_EQ(p.target->measured_bw_gbs, 0.0);  // absent: "not measured"
  ASSERT_EQ(p.buffers.size(), 2u);
  EXPECT_EQ(p.buffers[0].kind, BufferKind::IO_INPUT);
  EXPECT_EQ(p.buffers[0].shape, (std::vector<int64_t>{1, 16}));
  EXPECT_FALSE(p.buffers[0].source);
  EXPECT_EQ(p.buffers[1].source, "proj.weight");
  ASSERT_EQ(p.counters.size(), 1u);
  EXPECT_EQ(p.counters[0].note, "rmsnorm done");
  ASSERT_EQ(p.tasks.size(), 2u);
  const Task& t0 = p.tasks[0];
  EXPECT_EQ(t0.op, Op::RMSNORM);
  EXPECT_EQ(t0.inputs, (std::vector<int64_t>{0, 2}));
  ASSERT_NE(t0.params.find("eps"), nullptr);
  EXPECT_EQ(t0.params.find("eps")->kind, ParamValue::Kind::Real);
  EXPECT_DOUBLE_EQ(t0.params.find("eps")->f, 1e-6);
  EXPECT_EQ(*t0.params.find("hidden"), ParamValue::integer(16));
  const Task& t1 = p.tasks[1];
  EXPECT_EQ(t1.op, Op::GEMV_TILE);
  EXPECT_EQ(t1.waits, (std::vector<Wait>{{0, 1}}));
  EXPECT_EQ(t1.est_bytes, 0);  // absent in the example
  EXPECT_EQ(t1.label, "gemv");
  EXPECT_FALSE(t1.sm);
  // params keep the file's order
  ASSERT_EQ(t1.params.items().size(), 3u);
  EXPECT_EQ(t1.params.items()[0].first, "K");
  EXPECT_EQ(t1.params.items()[2].first, "n_off");
  ASSERT_TRUE(p.pages);
  EXPECT_EQ(p.pages->buffer_to_page, (std::vector<std::pair<int64_t, int64_t>>{{3, 0}, {4, 0}}));
  ASSERT_EQ(p.pages->pages.size(), 1u);
  EXPECT_EQ(p.pages->pages[0], (Page{0, MemSpace::SMEM, 64, 0, 1}));
  ASSERT_TRUE(p.config);
  EXPECT_EQ(*p.config, ScheduleConfig{});
}

// ---- compatibility with the reference writer ----------------------------------------------------

TEST(JsonPython, FileWrittenByTheReferenceRoundTripsByteForByte) {
  // Written by Python's json.dumps(indent=2) over to_dict()'s layout, with the hard cases:
  // non-ASCII (BMP and astral), control characters, repr() floats from 5e-324 to 1.8e308,
  // integers beyond int64, empty containers, deep meta, empty and odd keys.
  const std::string text = read_data("python_written.json");
  const LoadResult r = program_from_json(text);
  ASSERT_TRUE(r) << r.error;
  EXPECT_TRUE(r.warnings.empty()) << join(r.warnings);
  EXPECT_EQ(program_to_json(*r.program), text);
}

TEST(JsonPython, ReferenceFileDecodesToTheRightValues) {
  const Program p = load_ok(read_data("python_written.json"));
  EXPECT_EQ(p.meta_string("model"), "toy-\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80");
  ASSERT_EQ(p.tasks.size(), 2u);
  const Params& params = p.tasks[0].params;
  EXPECT_EQ(*params.find("flag"), ParamValue::other("true"));
  EXPECT_EQ(*params.find("mode"), ParamValue::other("\"fast\""));
  EXPECT_EQ(*params.find("list"), ParamValue::other("[1,2.5,\"x\"]"));
  EXPECT_EQ(*params.find("big"), ParamValue::other("99999999999999999999"));
  EXPECT_EQ(*params.find("none"), ParamValue::other("null"));
  EXPECT_EQ(*params.find("obj"), ParamValue::other("{\"a\":{}}"));
  EXPECT_EQ(p.tasks[1].sm, 7);
  EXPECT_EQ(p.tasks[1].label, "gemv \xe2\x86\x92 out");
  ASSERT_TRUE(p.config);
  EXPECT_EQ(p.config->tiling.size(), 2u);
  EXPECT_EQ(p.config->tiling[1].second,
            (ScheduleConfig::TileSizes{{"kv_block", 128}, {"q_block", 1}}));
  EXPECT_EQ(p.config->fusion_grouping,
            (std::vector<std::vector<std::string>>{{"rmsnorm", "gemv"}, {}}));
  EXPECT_EQ(std::get<ScheduleConfig::ExplicitSmMap>(p.config->sm_assignment),
            (ScheduleConfig::ExplicitSmMap{{0, 3}, {1, 131}}));
  EXPECT_EQ(p.buffers[4].space, MemSpace::GLOBAL_SCRATCH);
  EXPECT_TRUE(p.buffers[4].shape.empty());
}

TEST(JsonPython, NonFiniteFloatsAsPythonWritesThemAreRefusedClearly) {
  // json.dumps writes float('nan') as NaN, which is not JSON. A NaN eps cannot be meant.
  const std::string e = load_error(read_data("python_nan.json"));
  EXPECT_NE(e.find("syntax error at byte 352 (line 23, column 16)"), std::string::npos) << e;
  EXPECT_NE(e.find("NaN and Infinity are not JSON"), std::string::npos) << e;
  for (const char* lit : {"Infinity", "-Infinity", "NaN"}) {
    const std::string doc = std::string(R"({"meta": {"x": )") + lit + "}}";
    EXPECT_NE(load_error(doc).find("NaN and Infinity are not JSON"), std::string::npos) << doc;
  }
  EXPECT_NE(load_error(R"({"meta": {"x": 1e999}})").find("number overflow"), std::string::npos);
}

// ---- writing ----------------------------------------------------------------------------------

TEST(JsonWrite, LayoutIsPythonIndent2InToDictOrder) {
  Program p;
  p.set_meta_string("model", "m");
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F16, {2});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F16, {2});
  const int64_t c = p.new_counter("done");
  p.add_task(Op::COPY, {x}, {y}, c, {}, {}, "copy");
  const std::string expected = R"({
  "ir_version": "0.12.0",
  "abi_version": "0.12",
  "meta": {
    "model": "m"
  },
  "target": null,
  "buffers": [
    {
      "id": 0,
      "name": "x",
      "kind": "IO_INPUT",
      "dtype": "F16",
      "shape": [
        2
      ],
      "space": "HBM",
      "source": null
    },
    {
      "id": 1,
      "name": "y",
      "kind": "IO_OUTPUT",
      "dtype": "F16",
      "shape": [
        2
      ],
      "space": "HBM",
      "source": null
    }
  ],
  "counters": [
    {
      "id": 0,
      "init": 0,
      "note": "done"
    }
  ],
  "tasks": [
    {
      "id": 0,
      "op": "COPY",
      "inputs": [
        0
      ],
      "outputs": [
        1
      ],
      "out_counter": 0,
      "waits": [],
      "params": {},
      "sm": null,
      "est_bytes": 0,
      "est_flops": 0,
      "label": "copy"
    }
  ],
  "pages": null,
  "config": null
})";
  EXPECT_EQ(program_to_json(p), expected);
}

TEST(JsonWrite, EmptyProgram) {
  EXPECT_EQ(program_to_json(Program{}),
            "{\n  \"ir_version\": \"0.12.0\",\n  \"abi_version\": \"0.12\",\n  \"meta\": {},\n"
            "  \"target\": null,\n  \"buffers\": [],\n  \"counters\": [],\n  \"tasks\": [],\n"
            "  \"pages\": null,\n  \"config\": null\n}");
}

TEST(JsonWrite, TargetAndConfigPieces) {
  const GpuTarget* h100 = find_target("h100");
  ASSERT_NE(h100, nullptr);
  const std::string t = target_to_json(*h100);
  EXPECT_EQ(t.rfind("{\n  \"name\": \"h100\",\n  \"sm_arch\": 90,\n  \"num_sms\": 132,\n", 0), 0u)
      << t;
  EXPECT_NE(t.find("\n  \"hbm_bandwidth_gbs\": 3350.0,\n  \"fp16_tflops\": 989.0,\n"
                   "  \"clock_ghz\": 1.98,\n  \"supports_cooperative\": true,\n"
                   "  \"wddm_tdr\": false,\n  \"measured_bw_gbs\": 3100.0,\n  \"note\": "),
            std::string::npos)
      << t;
  EXPECT_EQ(config_to_json(ScheduleConfig{}),
            "{\n  \"tiling\": {},\n  \"fusion_grouping\": [],\n"
            "  \"sm_assignment\": \"load_balance\",\n  \"pipelining_depth\": 2,\n"
            "  \"page_allocation\": \"graph_color\",\n  \"threads_per_block\": 256,\n"
            "  \"smem_bytes_per_block\": 0\n}");
  ScheduleConfig c;
  c.tiling = {{"gemv", {{"N_tile", 256}}}};
  c.fusion_grouping = {{"rmsnorm", "gemv"}};
  c.sm_assignment = ScheduleConfig::ExplicitSmMap{{5, 1}, {2, 0}};
  EXPECT_EQ(config_to_json(c),
            "{\n  \"tiling\": {\n    \"gemv\": {\n      \"N_tile\": 256\n    }\n  },\n"
            "  \"fusion_grouping\": [\n    [\n      \"rmsnorm\",\n      \"gemv\"\n    ]\n  ],\n"
            "  \"sm_assignment\": {\n    \"5\": 1,\n    \"2\": 0\n  },\n"
            "  \"pipelining_depth\": 2,\n  \"page_allocation\": \"graph_color\",\n"
            "  \"threads_per_block\": 256,\n  \"smem_bytes_per_block\": 0\n}");
}

TEST(JsonWrite, FloatsAreWrittenAsPythonRepr) {
  const std::vector<std::pair<double, std::string>> cases = {
      {3350.0, "3350.0"},
      {1e-6, "1e-06"},
      {1e-5, "1e-05"},
      {1e-4, "0.0001"},
      {0.1, "0.1"},
      {-0.0, "-0.0"},
      {0.0, "0.0"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {1.5e300, "1.5e+300"},
      {5e-324, "5e-324"},
      {std::numeric_limits<double>::max(), "1.7976931348623157e+308"},
      {0.08838834764831845, "0.08838834764831845"},
      {500000.0, "500000.0"},
      {123456789.125, "123456789.125"},
  };
  for (const auto& [value, text] : cases) {
    Program p;
    p.counters.push_back({0, 0, ""});
    p.add_task(Op::NOP, {}, {}, 0, {}, Params{{"eps", ParamValue::real(value)}});
    const std::string json = program_to_json(p);
    EXPECT_NE(json.find("\"eps\": " + text + "\n"), std::string::npos) << text << "\n" << json;
    const Program back = load_ok(json);
    ASSERT_EQ(back.tasks.size(), 1u);
    const ParamValue* v = back.tasks[0].params.find("eps");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->kind, ParamValue::Kind::Real);
    EXPECT_EQ(std::signbit(v->f), std::signbit(value));
    EXPECT_EQ(v->f, value) << text;
  }
}

TEST(JsonWrite, StringsAreAsciiEscapedLikeEnsureAscii) {
  Program p;
  const std::string name =
      std::string("q\"b\\s/\n\r\t\b\f\x01\x1f\x7f") + "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
  p.new_buffer(name, BufferKind::ACTIVATION, DType::F32, {1});
  const std::string json = program_to_json(p);
  EXPECT_NE(json.find(R"("name": "q\"b\\s/\n\r\t\b\f\u0001\u001f\u007f\u00e9\u20ac\ud83d\ude00")"),
            std::string::npos)
      << json;
  for (unsigned char ch : json) EXPECT_LT(ch, 0x80);
  EXPECT_EQ(load_ok(json).buffers[0].name, p.buffers[0].name);
}

TEST(JsonWrite, IllFormedUtf8InMemoryIsWrittenAsReplacementCharacters) {
  Program p;
  p.new_buffer("bad\xff\xc3(\xed\xa0\x80", BufferKind::ACTIVATION, DType::F32, {1});
  const std::string json = program_to_json(p);
  EXPECT_NE(json.find(R"("bad\ufffd\ufffd(\ufffd\ufffd\ufffd")"), std::string::npos) << json;
  const Program back = load_ok(json);
  EXPECT_EQ(program_to_json(back), json);
}

TEST(JsonWrite, NonFiniteNumbersGetPythonSpellingsWhichDoNotLoad) {
  Program p;
  p.target = *find_target("h100");
  p.target->clock_ghz = std::nan("");
  p.target->measured_bw_gbs = -std::numeric_limits<double>::infinity();
  const std::string json = program_to_json(p);
  EXPECT_NE(json.find("\"clock_ghz\": NaN,"), std::string::npos);
  EXPECT_NE(json.find("\"measured_bw_gbs\": -Infinity,"), std::string::npos);
  EXPECT_NE(load_error(json).find("NaN and Infinity are not JSON"), std::string::npos);
}

TEST(JsonWrite, InMemoryOddities) {
  // Stored JSON text that is not JSON is written as a string, so the file still loads;
  // repeated map keys keep the first, as the loader refuses duplicates.
  Program p;
  p.meta = {{"ok", "[1,2]"}, {"broken", "{not json"}, {"ok", "\"second\""}};
  p.counters.push_back({0, 0, ""});
  p.add_task(Op::NOP, {}, {}, 0, {}, Params{{"x", ParamValue::other("nope")}});
  p.pages = PageAllocation{{{3, 0}, {3, 1}}, {}};
  ScheduleConfig c;
  c.sm_assignment = ScheduleConfig::ExplicitSmMap{{0, 1}, {0, 2}};
  c.tiling = {{"a", {{"t", 1}, {"t", 2}}}, {"a", {}}};
  p.config = c;
  const std::string json = program_to_json(p);
  const LoadResult r = program_from_json(json);
  ASSERT_TRUE(r) << r.error << "\n" << json;
  const Program& q = *r.program;
  ASSERT_EQ(q.meta.size(), 2u);
  EXPECT_EQ(q.meta[0], (std::pair<std::string, std::string>{"ok", "[1,2]"}));
  EXPECT_EQ(q.meta_string("broken"), "{not json");
  EXPECT_EQ(*q.tasks[0].params.find("x"), ParamValue::other("\"nope\""));
  EXPECT_EQ(q.pages->buffer_to_page, (std::vector<std::pair<int64_t, int64_t>>{{3, 0}}));
  EXPECT_EQ(std::get<ScheduleConfig::ExplicitSmMap>(q.config->sm_assignment),
            (ScheduleConfig::ExplicitSmMap{{0, 1}}));
  EXPECT_EQ(q.config->tiling, (decltype(c.tiling){{"a", {{"t", 1}}}}));
  EXPECT_EQ(program_to_json(q), json);
}

// ---- round trips ------------------------------------------------------------------------------

std::string random_text(std::mt19937_64& rng) {
  static const std::vector<std::string> pieces = {
      "a", "Z", "_", ".", " ", "\"", "\\", "/", "\n", "\t", "\x01", "\x7f", "\xc3\xa9",
      "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\xe2\x80\xa8", "0", "{", "]", "\\u0000", "NaN"};
  std::string s;
  const size_t n = rng() % 8;
  for (size_t i = 0; i < n; ++i) s += pieces[rng() % pieces.size()];
  if (rng() % 8 == 0) s.push_back('\0');
  return s;
}

double random_double(std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0: return static_cast<double>(static_cast<int64_t>(rng() % 2000000) - 1000000);
    case 1: return std::ldexp(static_cast<double>(rng() % 1000000), -static_cast<int>(rng() % 80));
    case 2: {
      double d = 0;
      do {
        const uint64_t bits = rng();
        std::memcpy(&d, &bits, sizeof d);
      } while (!std::isfinite(d));
      return d;
    }
    default: return 1e-6 * static_cast<double>(rng() % 1000);
  }
}

std::string random_json(std::mt19937_64& rng, int depth) {
  switch (rng() % (depth > 3 ? 5 : 7)) {
    case 0: return "null";
    case 1: return rng() % 2 ? "true" : "false";
    case 2: return std::to_string(static_cast<int64_t>(rng()));
    case 3: return rng() % 2 ? "1.5e-07" : "123456789012345678901234567890";
    case 4: return "\"" + std::string(rng() % 2 ? "x\\u00e9" : "") + "\"";
    case 5: {
      std::string s = "[";
      const size_t n = rng() % 4;
      for (size_t i = 0; i < n; ++i) s += (i ? "," : "") + random_json(rng, depth + 1);
      return s + "]";
    }
    default: {
      std::string s = "{";
      const size_t n = rng() % 4;
      for (size_t i = 0; i < n; ++i)
        s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + random_json(rng, depth + 1);
      return s + "}";
    }
  }
}

Program random_program(std::mt19937_64& rng) {
  Program p;
  const auto chance = [&](int pct) { return static_cast<int>(rng() % 100) < pct; };
  const auto small = [&](int64_t n) {
    return static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
  };
  if (chance(50)) p.set_meta_string("model", random_text(rng));
  if (chance(50)) p.meta.emplace_back("k" + random_text(rng) + "!", random_json(rng, 0));
  if (chance(30)) p.meta.emplace_back("n", "-5");
  if (chance(60)) {
    p.target = builtin_targets()[rng() % builtin_targets().size()];
    if (chance(30)) p.target->note = random_text(rng);
    if (chance(30)) p.target->hbm_bandwidth_gbs = random_double(rng);
  }
  const int64_t nbuf = small(6);
  for (int64_t i = 0; i < nbuf; ++i) {
    std::vector<int64_t> shape(static_cast<size_t>(small(5)));
    for (auto& d : shape) d = small(3) == 0 ? -small(100) : small(1 << 20);
    std::optional<std::string> source;
    if (chance(40)) source = random_text(rng);
    p.new_buffer(random_text(rng), static_cast<BufferKind>(small(kNumBufferKinds)),
                 static_cast<DType>(small(kNumDTypes)), shape,
                 static_cast<MemSpace>(small(kNumMemSpaces)), source);
    // Any four numbers travel; validate() judges them.
    if (chance(25))
      p.buffers.back().source_box =
          SourceBox{small(9) - 1, small(1 << 20), small(1 << 20), small(3) == 0 ? -small(9) : small(64)};
  }
  const int64_t nctr = small(5);
  for (int64_t i = 0; i < nctr; ++i) {
    p.new_counter(random_text(rng));
    if (chance(10)) p.counters.back().init = small(3);
  }
  const int64_t ntask = small(8);
  for (int64_t i = 0; i < ntask; ++i) {
    Params params;
    const int64_t np = small(5);
    for (int64_t k = 0; k < np; ++k) {
      const auto& fields = param_fields();
      const std::string name =
          chance(50) ? std::string(fields[rng() % fields.size()].name) : random_text(rng);
      switch (small(3)) {
        case 0: params.set_int(name, static_cast<int64_t>(rng())); break;
        case 1: params.set_real(name, random_double(rng)); break;
        default: params.set(name, ParamValue::other(random_json(rng, 0))); break;
      }
    }
    std::vector<Wait> waits;
    for (int64_t k = small(3); k > 0; --k) waits.push_back({small(5) - 1, small(4)});
    Task& t = p.add_task(static_cast<Op>(small(kNumOps)), {small(6), small(6)}, {small(6)},
                         small(5), waits, params, random_text(rng));
    if (chance(50)) t.sm = small(200) - 10;
    t.est_bytes = static_cast<int64_t>(rng() >> 1);
    t.est_flops = chance(50) ? 0 : -1;
  }
  if (chance(50)) {
    PageAllocation pa;
    for (int64_t b = 0; b < nbuf; ++b)
      if (chance(50)) pa.buffer_to_page.emplace_back(b, small(3));
    for (int64_t k = small(3); k > 0; --k)
      pa.pages.push_back({small(3), static_cast<MemSpace>(small(kNumMemSpaces)), small(1 << 20),
                          small(10) - 1, small(10) - 1});
    p.pages = pa;
  }
  if (chance(50)) {
    ScheduleConfig c;
    if (chance(50)) c.tiling = {{"gemv", {{"N_tile", 256}}}, {random_text(rng), {}}};
    if (chance(50)) c.fusion_grouping = {{random_text(rng)}, {}};
    if (chance(50)) {
      ScheduleConfig::ExplicitSmMap m;
      for (int64_t tid = 0; tid < ntask; ++tid) m.emplace_back(tid, small(132));
      c.sm_assignment = m;
    } else if (chance(50)) {
      c.sm_assignment = std::string("round_robin");
    }
    c.pipelining_depth = small(5);
    c.smem_bytes_per_block = small(1 << 17);
    if (chance(50)) c.stream_chunk_bytes = 16 * small(4096);
    if (chance(50)) c.stream_bytes_in_flight = small(1 << 20);
    if (chance(50)) c.stream_prefetch_bytes_in_flight = small(1 << 20);
    p.config = c;
  }
  return p;
}

TEST(JsonRoundTrip, VariedProgramsAreByteStable) {
  std::mt19937_64 rng(20261122);
  for (int i = 0; i < 400; ++i) {
    const Program p = random_program(rng);
    const std::string first = program_to_json(p);
    const LoadResult r = program_from_json(first);
    ASSERT_TRUE(r) << "program " << i << ": " << r.error << "\n" << first;
    EXPECT_TRUE(r.warnings.empty()) << join(r.warnings);
    const std::string second = program_to_json(*r.program);
    ASSERT_EQ(second, first) << "program " << i;
    // Everything typed survives exactly (meta/Other texts are normalised on the first load).
    EXPECT_EQ(r.program->buffers, p.buffers);
    EXPECT_EQ(r.program->counters, p.counters);
    EXPECT_EQ(r.program->target, p.target);
    EXPECT_EQ(r.program->pages, p.pages);
    EXPECT_EQ(r.program->config, p.config);
    ASSERT_EQ(r.program->tasks.size(), p.tasks.size());
    for (size_t t = 0; t < p.tasks.size(); ++t) {
      EXPECT_EQ(r.program->tasks[t].waits, p.tasks[t].waits);
      EXPECT_EQ(r.program->tasks[t].label, p.tasks[t].label);
      EXPECT_EQ(r.program->tasks[t].sm, p.tasks[t].sm);
    }
    // and a second load reproduces the first exactly
    EXPECT_EQ(*program_from_json(second).program, *r.program);
  }
}

// A weight's box (IR 0.12.0) is written after its source, only where there is one, so files
// without boxes are what earlier builds wrote.
TEST(JsonRoundTrip, ASourceBoxIsWrittenOnlyWhereThereIsOne) {
  Program p;
  p.new_buffer("w", BufferKind::WEIGHT, DType::BF16, {2, 3}, MemSpace::HBM, "model.w");
  p.new_buffer("box", BufferKind::WEIGHT, DType::BF16, {2, 3}, MemSpace::HBM, "model.w");
  p.buffers[1].source_box = SourceBox{4, 2, 8, 3};
  const std::string text = program_to_json(p);
  const size_t first = text.find("\"source_box\"");
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find("\"source_box\"", first + 1), std::string::npos) << text;
  EXPECT_GT(first, text.find("\"name\": \"box\"")) << text;
  const LoadResult r = program_from_json(text);
  ASSERT_TRUE(r) << r.error;
  EXPECT_FALSE(r.program->buffers[0].source_box);
  EXPECT_EQ(r.program->buffers[1].source_box, (SourceBox{4, 2, 8, 3}));
  EXPECT_EQ(program_to_json(*r.program), text);
}

TEST(JsonRoundTrip, LargeProgramStreamsThroughTheLoader) {
  Program p;
  p.target = *find_target("h200");
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::BF16, {1, 4096});
  int64_t prev_counter = -1;
  for (int layer = 0; layer < 200; ++layer) {
    const int64_t w = p.new_buffer("w" + std::to_string(layer), BufferKind::WEIGHT, DType::BF16,
                                   {4096, 4096}, MemSpace::HBM, "layers.w");
    const int64_t y = p.new_buffer("y" + std::to_string(layer), BufferKind::ACTIVATION, DType::F32,
                                   {1, 4096});
    const int64_t c = p.new_counter();
    for (int tile = 0; tile < 64; ++tile) {
      std::vector<Wait> waits;
      if (prev_counter >= 0) waits.push_back({prev_counter, 64});
      p.add_task(Op::GEMV_TILE, {x, w}, {y}, c, waits,
                 Params{{"K", ParamValue::integer(4096)}, {"N_tile", ParamValue::integer(64)},
                        {"n_off", ParamValue::integer(tile * 64)}},
                 "L" + std::to_string(layer) + ".t" + std::to_string(tile));
    }
    prev_counter = c;
  }
  const std::string json = program_to_json(p);
  const LoadResult r = program_from_json(json);
  ASSERT_TRUE(r) << r.error;
  EXPECT_EQ(*r.program, p);
  EXPECT_EQ(program_to_json(*r.program), json);
}

// ---- defaults and values ----------------------------------------------------------------------

TEST(JsonDefaults, AbsentOptionalFieldsTakeTheReferenceDefaults) {
  const Program empty = load_ok("{}");
  EXPECT_EQ(empty, Program{});
  const Program p = load_ok(R"({
    "buffers": [{"id": 0, "name": "b", "kind": "ACTIVATION", "dtype": "F32", "shape": [4]}],
    "counters": [{"id": 0}],
    "tasks": [{"id": 0, "op": "NOP", "inputs": [], "outputs": [], "out_counter": 0}],
    "pages": {"buffer_to_page": {}, "pages": [{"id": 0, "space": "SMEM", "nbytes": 16}]},
    "config": {"pipelining_depth": 0}
  })");
  EXPECT_EQ(p.ir_version, kIrVersion);
  EXPECT_EQ(p.abi_version, kAbiVersion);
  EXPECT_EQ(p.buffers[0].space, MemSpace::HBM);
  EXPECT_FALSE(p.buffers[0].source);
  EXPECT_EQ(p.counters[0], (Counter{0, 0, ""}));
  const Task& t = p.tasks[0];
  EXPECT_TRUE(t.waits.empty());
  EXPECT_TRUE(t.params.items().empty());
  EXPECT_FALSE(t.sm);
  EXPECT_EQ(t.est_bytes, 0);
  EXPECT_EQ(t.est_flops, 0);
  EXPECT_EQ(t.label, "");
  EXPECT_EQ(p.pages->pages[0], (Page{0, MemSpace::SMEM, 16, -1, -1}));
  ScheduleConfig expected;
  expected.pipelining_depth = 0;
  EXPECT_EQ(*p.config, expected);
}

TEST(JsonDefaults, EmptyTargetPagesConfigReadAsNullLikeTheReference) {
  const LoadResult r = program_from_json(R"({"target": {}, "pages": {}, "config": {}})");
  ASSERT_TRUE(r) << r.error;
  EXPECT_FALSE(r.program->target);
  EXPECT_FALSE(r.program->pages);
  EXPECT_FALSE(r.program->config);
  EXPECT_TRUE(has_warning(r, "$.config: empty object read as null")) << join(r.warnings);
  const Program n = load_ok(R"({"target": null, "pages": null, "config": null})");
  EXPECT_FALSE(n.target);
}

TEST(JsonValues, ParamValueKinds) {
  const Program p = load_ok(with_tasks(
      R"({"id": 0, "op": "NOP", "inputs": [], "outputs": [], "out_counter": 0, "params": {
        "i": 7, "neg": -3, "imax": 9223372036854775807, "imin": -9223372036854775808,
        "over": 9223372036854775808, "under": -9223372036854775809,
        "r": 2.0, "e": 1E5, "tiny": 1e-400, "b": false, "s": "x", "n": null,
        "a": [1, {"z": 2.50}], "o": {}}})"));
  const Params& ps = p.tasks[0].params;
  EXPECT_EQ(*ps.find("i"), ParamValue::integer(7));
  EXPECT_EQ(*ps.find("neg"), ParamValue::integer(-3));
  EXPECT_EQ(*ps.find("imax"), ParamValue::integer(std::numeric_limits<int64_t>::max()));
  EXPECT_EQ(*ps.find("imin"), ParamValue::integer(std::numeric_limits<int64_t>::min()));
  EXPECT_EQ(*ps.find("over"), ParamValue::other("9223372036854775808"));
  EXPECT_EQ(*ps.find("under"), ParamValue::other("-9223372036854775809"));
  EXPECT_EQ(*ps.find("r"), ParamValue::real(2.0));
  EXPECT_EQ(*ps.find("e"), ParamValue::real(1e5));
  EXPECT_EQ(*ps.find("tiny"), ParamValue::real(0.0));
  EXPECT_EQ(*ps.find("b"), ParamValue::other("false"));
  EXPECT_EQ(*ps.find("s"), ParamValue::other("\"x\""));
  EXPECT_EQ(*ps.find("n"), ParamValue::other("null"));
  EXPECT_EQ(*ps.find("a"), ParamValue::other("[1,{\"z\":2.5}]"));
  EXPECT_EQ(*ps.find("o"), ParamValue::other("{}"));
}

TEST(JsonValues, MetaValuesAreKeptAsCompactJsonInOrder) {
  const Program p = load_ok(
      R"({"meta": {"z": 1, "a": {"x": [1.50, true, null]}, "u": "\u00e9\ud83d\ude00", "m": -0}})");
  ASSERT_EQ(p.meta.size(), 4u);
  EXPECT_EQ(p.meta[0], (std::pair<std::string, std::string>{"z", "1"}));
  EXPECT_EQ(p.meta[1], (std::pair<std::string, std::string>{"a", R"({"x":[1.5,true,null]})"}));
  EXPECT_EQ(p.meta[2].second, R"("\u00e9\ud83d\ude00")");
  EXPECT_EQ(p.meta[3].second, "0");
  EXPECT_EQ(p.meta_string("u"), "\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_FALSE(p.meta_string("a"));
  EXPECT_FALSE(p.meta_string("missing"));
}

TEST(JsonValues, NegativeAndOutOfRangeValuesLoadForValidateToJudge) {
  const Program p = load_ok(R"({
    "buffers": [{"id": -1, "name": "", "kind": "ACTIVATION", "dtype": "F32", "shape": [-4, 0]}],
    "counters": [{"id": -7, "init": -1}],
    "tasks": [{"id": -2, "op": "ADD", "inputs": [99, -1], "outputs": [], "out_counter": 12,
               "waits": [{"counter": -1, "threshold": 0}], "sm": -3, "est_bytes": -1}]})");
  EXPECT_EQ(p.buffers[0].id, -1);
  EXPECT_EQ(p.buffers[0].shape, (std::vector<int64_t>{-4, 0}));
  EXPECT_EQ(p.counters[0].init, -1);
  EXPECT_EQ(p.tasks[0].waits[0], (Wait{-1, 0}));
  EXPECT_EQ(p.tasks[0].sm, -3);
}

TEST(JsonValues, IntegersForFloatFieldsAreAccepted) {
  const Program p = load_ok(R"({"target": {"name": "t", "sm_arch": 90, "num_sms": 1,
    "smem_bytes_per_sm": 1, "smem_bytes_per_block_optin": 1, "regs_per_sm": 1,
    "max_threads_per_sm": 1, "max_regs_per_thread": 1, "l2_bytes": 1, "hbm_bytes": 1,
    "hbm_bandwidth_gbs": 3350, "fp16_tflops": 18446744073709551616}})");
  EXPECT_EQ(p.target->hbm_bandwidth_gbs, 3350.0);
  EXPECT_EQ(p.target->fp16_tflops, 18446744073709551616.0);
  EXPECT_NE(program_to_json(p).find("\"hbm_bandwidth_gbs\": 3350.0,"), std::string::npos);
}

// ---- strict types, every error naming its path --------------------------------------------------

struct TypeCase {
  std::string doc;
  std::string error;
};

TEST(JsonTypes, EveryTypeErrorNamesThePath) {
  const std::string t = kTask;
  const std::string waits4 = R"([{"counter": 0, "threshold": 1}])";
  const std::vector<TypeCase> cases = {
      {with_tasks(t + "," + t + "," + t + R"(, {"id": 3, "op": "NOP", "inputs": [], "outputs": [],
          "out_counter": 0, "waits": [{"counter": 0, "threshold": "2"}]})"),
       R"($.tasks[3].waits[0].threshold: expected an integer, got string "2")"},
      {with_tasks(R"({"id": 0, "op": "NOP", "inputs": [], "outputs": [], "out_counter": 0,
          "waits": [{"counter": 0, "threshold": 2.0}]})"),
       "$.tasks[0].waits[0].threshold: expected an integer, got number 2.0"},
      {with_tasks(R"({"id": true, "op": "NOP", "inputs": [], "outputs": [], "out_counter": 0})"),
       "$.tasks[0].id: expected an integer, got boolean true"},
      {with_tasks(R"({"id": "0", "op": "NOP", "inputs": [], "outputs": [], "out_counter": 0})"),
       R"($.tasks[0].id: expected an integer, got string "0")"},
      {with_tasks(R"({"id": 0, "op": "NOP", "inputs": [1, 9223372036854775808], "outputs": [],
          "out_counter": 0})"),
       "$.tasks[0].inputs[1]: integer 9223372036854775808 is out of the int64 range"},
      {with_tasks(R"({"id": 0, "op": "NOP", "inputs": [], "outputs": [],
          "out_counter": -99999999999999999999})"),
       "$.tasks[0].out_counter: integer -99999999999999999999 is out of the int64 range"},
      {with_tasks(R"({"id": 0, "op": "NOP", "inputs": {}, "outputs": [], "out_counter": 0})"),
       "$.tasks[0].inputs: expected an array, got object"},
      {with_tasks(R"({"id": 0, "op": "NOP", "inputs": [], "outputs": [], "out_counter": 0,
          "sm": "3"})"),
       R"($.tasks[0].sm: expected an integer or null, got string "3")"},
      {with_tasks(R"({"id": 0, "op": "NOP", "inputs": [], "outputs": [], "out_counter": 0,
          "label": 5})"),
       "$.tasks[0].label: expected a string, got integer 5"},
      {with_tasks(R"({"id": 0, "op": "NOP", "inputs": [], "outputs": [], "out_counter": 0,
          "params": []})"),
       "$.tasks[0].params: expected an object, got array"},
      {with_tasks(R"({"id": 0, "op": "NOP", "inputs": [], "outputs": [], "out_counter": 0,
          "waits": [{"counter": 0}]})"),
       R"($.tasks[0].waits[0]: missing required field "threshold")"},
      {with_tasks(R"({"id": 0, "op": "NOP", "inputs": [], "outputs": [], "out_counter": 0,
          "waits": [3]})"),
       "$.tasks[0].waits[0]: expected an object, got integer 3"},
      {with_tasks(R"({"id": 0, "inputs": [], "outputs": [], "out_counter": 0})"),
       R"($.tasks[0]: missing required field "op")"},
      {with_tasks(R"({"id": 0, "op": "GEMV", "inputs": [], "outputs": [], "out_counter": 0})"),
       R"($.tasks[0].op: unknown op "GEMV" (expected one of NOP, COPY, EMBED, RMSNORM, )"
       R"(LAYERNORM, GEMV_TILE, GEMM_TILE, ATTENTION_TILE, ROPE, SILU_MUL, GELU, ADD, MUL, )"
       R"(DEQUANT, SOFTMAX, ALLREDUCE_SHARD, KV_APPEND, SAMPLE_ARGMAX, ATTENTION_COMBINE, )"
       R"(ROPE_FREQ, RMSNORM_GEMV_TILE, SILU_MUL_GEMV_TILE, GEMV_ADD_TILE, )"
       R"(SILU_MUL_GEMV_ADD_TILE, ROPE_KV_ATTENTION_TILE, GEMV_GLU_TILE, )"
       R"(RMSNORM_GEMV_GLU_TILE, COMBINE_GEMV_ADD_TILE, RMSNORM_GEMV_GLU_DOWN_TILE))"},
      {with_tasks("7"), "$.tasks[0]: expected an object, got integer 7"},
      {R"({"buffers": [{"id": 0, "name": "a", "kind": "WEIGHT", "dtype": "F32", "shape": [1]},
          {"id": 1, "name": "b", "kind": "WEIGHT", "dtype": "F32", "shape": [1]},
          {"id": 2, "name": "c", "kind": "WEIGHT", "dtype": "BF17", "shape": [1]}]})",
       R"($.buffers[2].dtype: unknown dtype "BF17" (expected one of F32, F16, BF16, F8E4M3, )"
       R"(F8E5M2, I32, I8, I4, U8, BOOL))"},
      {R"({"buffers": [{"id": 0, "name": "a", "kind": "weight", "dtype": "F32", "shape": [1]}]})",
       R"($.buffers[0].kind: unknown kind "weight" (expected one of WEIGHT, ACTIVATION, )"
       R"(KV_CACHE, IO_INPUT, IO_OUTPUT, CONST))"},
      {R"({"buffers": [{"id": 0, "name": "a", "kind": "WEIGHT", "dtype": 2, "shape": [1]}]})",
       "$.buffers[0].dtype: expected a string, got integer 2"},
      {R"({"buffers": [{"id": 0, "name": "a", "kind": "WEIGHT", "dtype": "F32",
          "shape": [1, "2"]}]})",
       R"($.buffers[0].shape[1]: expected an integer, got string "2")"},
      {R"({"buffers": [{"id": 0, "name": "a", "kind": "WEIGHT", "dtype": "F32", "shape": 4}]})",
       "$.buffers[0].shape: expected an array, got integer 4"},
      {R"({"buffers": [{"id": 0, "name": null, "kind": "WEIGHT", "dtype": "F32", "shape": []}]})",
       "$.buffers[0].name: expected a string, got null"},
      {R"({"buffers": [{"id": 0, "name": "a", "kind": "WEIGHT", "dtype": "F32", "shape": [],
          "source": 1}]})",
       "$.buffers[0].source: expected a string or null, got integer 1"},
      {R"({"buffers": [{"id": 0, "name": "a", "kind": "WEIGHT", "dtype": "F32", "shape": [2, 3],
          "source": "w", "source_box": [0, 2, 1]}]})",
       "$.buffers[0].source_box: expected [row0, rows, col0, cols], got 3 numbers"},
      {R"({"buffers": [{"id": 0, "name": "a", "kind": "WEIGHT", "dtype": "F32", "shape": [2, 3],
          "source": "w", "source_box": [0, 2, "1", 3]}]})",
       R"($.buffers[0].source_box[2]: expected an integer, got string "1")"},
      {R"({"buffers": [{"id": 0, "name": "a", "kind": "WEIGHT", "dtype": "F32", "shape": [],
          "space": "L2"}]})",
       R"($.buffers[0].space: unknown space "L2" (expected one of HBM, GLOBAL_SCRATCH, SMEM, )"
       R"(REGISTER))"},
      {R"({"buffers": [{"name": "a", "kind": "WEIGHT", "dtype": "F32", "shape": []}]})",
       R"($.buffers[0]: missing required field "id")"},
      {R"({"buffers": {"0": {}}})", "$.buffers: expected an array, got object"},
      {R"({"counters": null})", "$.counters: expected an array, got null"},
      {R"({"tasks": "none"})", R"($.tasks: expected an array, got string "none")"},
      {R"({"counters": [{"id": 0, "note": []}]})",
       "$.counters[0].note: expected a string, got array"},
      {R"({"counters": [{"id": 0, "init": 1.5}]})",
       "$.counters[0].init: expected an integer, got number 1.5"},
      {R"({"counters": [{}]})", R"($.counters[0]: missing required field "id")"},
      {"[]", "$: expected an object, got array"},
      {"\"program\"", R"($: expected an object, got string "program")"},
      {R"({"meta": []})", "$.meta: expected an object, got array"},
      {R"({"meta": null})", "$.meta: expected an object, got null"},
      {R"({"target": []})", "$.target: expected an object or null, got array"},
      {R"({"target": {"name": "x", "sm_arch": "90"}})",
       R"($.target.sm_arch: expected an integer, got string "90")"},
      {R"({"target": {"name": "t", "sm_arch": 90, "num_sms": 1, "smem_bytes_per_sm": 1,
          "smem_bytes_per_block_optin": 1, "regs_per_sm": 1, "max_threads_per_sm": 1,
          "max_regs_per_thread": 1, "l2_bytes": 1, "hbm_bytes": 1, "hbm_bandwidth_gbs": "fast",
          "fp16_tflops": 1}})",
       R"($.target.hbm_bandwidth_gbs: expected a number, got string "fast")"},
      {R"({"target": {"name": "t", "sm_arch": 90, "num_sms": 1, "smem_bytes_per_sm": 1,
          "smem_bytes_per_block_optin": 1, "regs_per_sm": 1, "max_threads_per_sm": 1,
          "max_regs_per_thread": 1, "l2_bytes": 1, "hbm_bytes": 1, "hbm_bandwidth_gbs": 1,
          "fp16_tflops": 1, "wddm_tdr": 0}})",
       "$.target.wddm_tdr: expected a boolean, got integer 0"},
      {R"({"pages": {"buffer_to_page": {"x": 0}, "pages": []}})",
       R"($.pages.buffer_to_page.x: key "x" is not a buffer id (an integer written as a )"
       R"(string, e.g. "3"))"},
      {R"({"pages": {"buffer_to_page": {"1.0": 0}, "pages": []}})",
       R"($.pages.buffer_to_page["1.0"]: key "1.0" is not a buffer id)"},
      {R"({"pages": {"buffer_to_page": {"99999999999999999999": 0}, "pages": []}})",
       R"($.pages.buffer_to_page["99999999999999999999"]: key "99999999999999999999" is not a )"
       R"(buffer id)"},
      {R"({"pages": {"buffer_to_page": {"3": 0, "03": 1}, "pages": []}})",
       R"($.pages.buffer_to_page["03"]: buffer 3 appears twice)"},
      {R"({"pages": {"buffer_to_page": {"3": "0"}, "pages": []}})",
       R"($.pages.buffer_to_page["3"]: expected an integer, got string "0")"},
      {R"({"pages": {"pages": []}})", R"($.pages: missing required field "buffer_to_page")"},
      {R"({"pages": {"buffer_to_page": {}, "pages": [{"id": 0, "space": "SMEM"}]}})",
       R"($.pages.pages[0]: missing required field "nbytes")"},
      {R"({"config": {"sm_assignment": 3}})",
       "$.config.sm_assignment: expected a string or an object, got integer 3"},
      {R"({"config": {"sm_assignment": {"t0": 1}}})",
       R"($.config.sm_assignment.t0: key "t0" is not a task id)"},
      {R"({"config": {"tiling": {"gemv": {"N_tile": "256"}}}})",
       R"($.config.tiling.gemv.N_tile: expected an integer, got string "256")"},
      {R"({"config": {"fusion_grouping": [["a", 1]]}})",
       "$.config.fusion_grouping[0][1]: expected a string, got integer 1"},
      {R"({"config": {"threads_per_block": 256.0}})",
       "$.config.threads_per_block: expected an integer, got number 256.0"},
      {R"({"ir_version": 0.2})", "$.ir_version: expected a string, got number 0.2"},
      {R"({"abi_version": null})", "$.abi_version: expected a string, got null"},
      {R"({"meta": {"a b": {"c": {"c": 1, "c": 2}}}})", R"($.meta["a b"].c.c: duplicate key "c")"},
  };
  for (const TypeCase& c : cases) {
    const LoadResult r = program_from_json(c.doc);
    ASSERT_FALSE(r) << c.doc;
    EXPECT_EQ(r.error.rfind(c.error, 0), 0u)
        << "got:      " << r.error << "\nexpected: " << c.error;
  }
}

TEST(JsonTypes, DuplicateKeysAreRefusedEverywhere) {
  EXPECT_EQ(load_error(R"({"tasks": [], "tasks": []})"), R"($.tasks: duplicate key "tasks")");
  EXPECT_EQ(load_error(with_tasks(R"({"id": 0, "op": "NOP", "op": "ADD", "inputs": [],
                                     "outputs": [], "out_counter": 0})")),
            R"($.tasks[0].op: duplicate key "op")");
  EXPECT_EQ(load_error(R"({"config": {"sm_assignment": {"0": 1, "0": 2}}})"),
            R"($.config.sm_assignment["0"]: duplicate key "0")");
  // beyond the linear-scan size, where the builder switches to hashing
  std::string big = R"({"meta": {)";
  for (int i = 0; i < 100; ++i) big += "\"k" + std::to_string(i) + "\": " + std::to_string(i) + ",";
  EXPECT_EQ(load_error(big + R"("k57": 0}})"), R"($.meta.k57: duplicate key "k57")");
  EXPECT_EQ(load_ok(big + R"("k100": 0}})").meta.size(), 101u);
}

TEST(JsonTypes, FirstBadRecordIsReportedEvenWithLaterOnes) {
  const std::string e = load_error(with_tasks(std::string(kTask) + R"(, {"id": 1}, {"id": "x"})"));
  EXPECT_EQ(e, R"($.tasks[1]: missing required field "op")");
}

// ---- versions and forward compatibility -------------------------------------------------------

TEST(JsonVersions, NewerMinorLoadsWithWarningsAndDropsUnknownFields) {
  const LoadResult r = program_from_json(read_data("newer_minor.json"));
  ASSERT_TRUE(r) << r.error;
  const std::string all = join(r.warnings);
  EXPECT_TRUE(has_warning(r, "$.ir_version: the file is IR 0.13.0, newer than this build's 0.12.0"))
      << all;
  EXPECT_TRUE(has_warning(r, R"($.target: unknown field "tma_units" dropped)")) << all;
  EXPECT_TRUE(has_warning(r, R"($.target: unknown field "nvlink_gbs" dropped)")) << all;
  EXPECT_TRUE(has_warning(r, R"($.config: unknown field "cluster_dims" dropped)")) << all;
  EXPECT_TRUE(has_warning(r, R"($.counters[0]: unknown field "scope" dropped)")) << all;
  EXPECT_TRUE(has_warning(r, R"($.tasks[0]: unknown field "priority" dropped)")) << all;
  EXPECT_TRUE(has_warning(r, R"($: unknown field "schedule_hash" dropped)")) << all;
  // the same field in many records is one line
  EXPECT_TRUE(has_warning(r, R"($.buffers[*]: unknown field "layout" dropped (not in this )"
                             R"(version of the format) (2 times, first at $.buffers[0]))"))
      << all;
  EXPECT_EQ(r.warnings.size(), 8u) << all;
  EXPECT_EQ(r.program->ir_version, "0.13.0");  // kept, as the reference keeps it
  EXPECT_EQ(r.program->target->num_sms, 132);
  EXPECT_EQ(std::get<std::string>(r.program->config->sm_assignment), "round_robin");
  // and the known fields round-trip
  const std::string out = program_to_json(*r.program);
  EXPECT_EQ(out.find("tma_units"), std::string::npos);
  EXPECT_EQ(program_to_json(load_ok(out)), out);
}

// IR 0.8.0 stores each KV head's history contiguously ([n_kv_heads, max_seq, head_dim]); an
// older file's caches ([max_seq, n_kv_heads, head_dim]) are read with dims 0 and 1 swapped, and
// say so. Other buffers, and caches of a 0.8.0 file, keep their shapes.
TEST(JsonVersions, OlderKvCachesAreReadInTheHeadMajorLayout) {
  const auto file = [](const char* version) {
    return std::string(R"({"ir_version": ")") + version + R"(", "buffers": [
      {"id": 0, "name": "kv", "kind": "KV_CACHE", "dtype": "F32", "shape": [64, 2, 16]},
      {"id": 1, "name": "x", "kind": "ACTIVATION", "dtype": "F32", "shape": [64, 2, 16]}]})";
  };
  const LoadResult old = program_from_json(file("0.7.0"));
  ASSERT_TRUE(old) << old.error;
  EXPECT_EQ(old.program->buffers[0].shape, (std::vector<int64_t>{2, 64, 16}));
  EXPECT_EQ(old.program->buffers[1].shape, (std::vector<int64_t>{64, 2, 16}));
  EXPECT_TRUE(has_warning(old, "$.buffers[0].shape: IR 0.7.0 KV caches are [max_seq, "
                               "n_kv_heads, head_dim]; read as [n_kv_heads, max_seq, head_dim]"))
      << join(old.warnings);
  EXPECT_EQ(old.warnings.size(), 1u) << join(old.warnings);
  // Upgraded, the program is this build's: written and read again it keeps the new layout (a
  // file that kept "0.7.0" would be swapped back on every load; fuzz_json found it).
  EXPECT_EQ(old.program->ir_version, kIrVersion);
  const std::string written = program_to_json(*old.program);
  const LoadResult again = program_from_json(written);
  ASSERT_TRUE(again) << again.error;
  EXPECT_EQ(*again.program, *old.program);
  EXPECT_TRUE(again.warnings.empty()) << join(again.warnings);
  EXPECT_EQ(program_to_json(*again.program), written);
  // An older file without caches keeps its version (nothing in it was read differently).
  EXPECT_EQ(load_ok(R"({"ir_version": "0.7.0"})").ir_version, "0.7.0");
  const LoadResult now = program_from_json(file("0.8.0"));
  ASSERT_TRUE(now) << now.error;
  EXPECT_EQ(now.program->buffers[0].shape, (std::vector<int64_t>{64, 2, 16}));
  EXPECT_TRUE(now.warnings.empty()) << join(now.warnings);
}

TEST(JsonVersions, MajorMismatchIsRefused) {
  EXPECT_EQ(load_error(read_data("major_mismatch.json")),
            "$.ir_version: IR major version mismatch: file 1.0.0, this build reads 0.x");
  EXPECT_EQ(load_error(R"({"abi_version": "1.0"})"),
            "$.abi_version: ABI major version mismatch: file 1.0, this build reads 0.x");
  EXPECT_NE(load_error(R"({"ir_version": ""})").find("major version mismatch"), std::string::npos);
  EXPECT_NE(load_error(R"({"ir_version": "00.2.0"})").find("major version mismatch"),
            std::string::npos);
  // a 1.x file with records we cannot read still says why: the version, not the records
  EXPECT_EQ(load_error(R"({"tasks": [{"task_id": 0}], "ir_version": "1.0.0"})"),
            "$.ir_version: IR major version mismatch: file 1.0.0, this build reads 0.x");
}

TEST(JsonVersions, OlderAndEqualVersionsLoadQuietly) {
  for (const char* v :
       {"0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.4.7", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "0.9.0", "0.10.0", "0.11.0", "0.12.0", "0"}) {
    const LoadResult r = program_from_json(std::string(R"({"ir_version": ")") + v + "\"}");
    ASSERT_TRUE(r) << v << ": " << r.error;
    EXPECT_TRUE(r.warnings.empty()) << v << ": " << join(r.warnings);
    EXPECT_EQ(r.program->ir_version, v);
  }
  const LoadResult abi = program_from_json(R"({"abi_version": "0.13"})");
  ASSERT_TRUE(abi);
  EXPECT_TRUE(has_warning(abi, "newer than this build's 0.12")) << join(abi.warnings);
  const LoadResult odd = program_from_json(R"({"ir_version": "0.x"})");
  ASSERT_TRUE(odd);
  EXPECT_TRUE(has_warning(odd, "cannot compare")) << join(odd.warnings);
}

// ---- malformed input --------------------------------------------------------------------------

TEST(JsonMalformed, SyntaxErrorsGiveTheByteOffset) {
  const std::vector<TypeCase> cases = {
      {"", "syntax error at byte 0: empty input"},
      {" \n\t ", "syntax error at byte 0: empty input"},
      {"{", "syntax error at byte 1 (line 1, column 2)"},
      {R"({"tasks": [)", "syntax error at byte 11 (line 1, column 12)"},
      {"{}\n}", "syntax error at byte 3 (line 2, column 1)"},
      {"{} {}", "syntax error at byte 3 (line 1, column 4)"},
      {"{}garbage", "syntax error at byte 2"},
      {R"({"a": 1,})", "syntax error at byte 8"},
      {"{'a': 1}", "syntax error at byte 1"},
      {"{\"meta\": {\"x\": \"\xff\"}}", "syntax error at byte 16"},
      {"{\"meta\": {\"x\": \"\xc0\xaf\"}}", "syntax error at byte 16"},  // overlong
      {"{\"meta\": {\"x\": \"\xed\xa0\x80\"}}", "syntax error at byte 17"},  // surrogate
      {R"({"meta": {"x": "\ud800"}})", "syntax error at byte 22"},
      {R"({"meta": {"x": "\udc00x"}})", "syntax error at byte 21"},
      {"{\"meta\": {\"x\": \"a\nb\"}}", "syntax error at byte 17"},
      {"{/* c */}", "syntax error at byte 1"},
      {"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", "syntax error at byte 0"},
      {std::string("{\"a\"\0: 1}", 9), "syntax error at byte 4"},
      {"{\"meta\": {\"x\": 01}}", "syntax error at byte 16"},
  };
  for (const TypeCase& c : cases) {
    const std::string e = load_error(c.doc);
    EXPECT_EQ(e.rfind(c.error, 0), 0u) << "got:      " << e << "\nexpected: " << c.error;
    for (unsigned char ch : e) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << e;
  }
}

TEST(JsonMalformed, EveryTruncationOfAValidProgramFailsCleanly) {
  const std::string text = read_data("python_written.json");
  ASSERT_TRUE(program_from_json(text));
  for (size_t n = 0; n < text.size(); ++n) {
    const LoadResult r = program_from_json(std::string_view(text).substr(0, n));
    ASSERT_FALSE(r) << n;
    ASSERT_EQ(r.error.rfind("syntax error at byte ", 0), 0u) << n << ": " << r.error;
  }
}

TEST(JsonMalformed, HugeTokensDoNotMakeHugeMessages) {
  const std::string e =
      load_error("{\"meta\": {\"x\": \"" + std::string(1 << 20, 'a') + "\xff\"}}");
  EXPECT_LT(e.size(), 400u) << e;
  EXPECT_NE(e.find("ill-formed UTF-8"), std::string::npos) << e;
  const std::string big = std::string(R"({"tasks": [{"id": 0, "op": ")") +
                          std::string(1 << 20, 'X') + "\"}]}";
  // An unknown op's message lists every op name (a list that grows with each opcode), so its
  // bound is looser; what matters is that the 1 MiB token is cut short.
  const std::string op_error = load_error(big);
  EXPECT_LT(op_error.size(), 1000u) << op_error;
  EXPECT_EQ(op_error.find(std::string(100, 'X')), std::string::npos) << op_error;
  EXPECT_NE(op_error.find("unknown op"), std::string::npos) << op_error;
}

TEST(JsonMalformed, RandomBytesNeverCrash) {
  std::mt19937_64 rng(7);
  const std::string seed = read_data("spec_example_complete.json");
  for (int i = 0; i < 3000; ++i) {
    std::string s = seed;
    for (int k = static_cast<int>(rng() % 4); k >= 0; --k) {
      const size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0: s[at] = static_cast<char>(rng()); break;
        case 1: s.erase(at, 1 + rng() % 8); break;
        default: s.insert(at, 1, "{}[]\",:0-e.\\"[rng() % 12]); break;
      }
      if (s.empty()) s = "{";
    }
    const LoadResult r = program_from_json(s);
    if (r) EXPECT_EQ(program_to_json(*program_from_json(program_to_json(*r.program)).program),
                     program_to_json(*r.program));
    else EXPECT_FALSE(r.error.empty());
  }
}

// ---- nesting ----------------------------------------------------------------------------------

TEST(JsonDeep, TwoHundredThousandLevelsAreRefusedBeforeAnythingDeepIsBuilt) {
  const size_t n = 200000;
  const std::string arrays(n, '[');
  EXPECT_EQ(load_error(arrays), "nesting deeper than 64 levels at byte 64");
  EXPECT_EQ(load_error(arrays + std::string(n, ']')), "nesting deeper than 64 levels at byte 64");
  std::string objects;
  for (size_t i = 0; i < n; ++i) objects += "{\"a\":";
  EXPECT_EQ(load_error(objects), "nesting deeper than 64 levels at byte 320");
  EXPECT_EQ(load_error(objects + "1" + std::string(n, '}')),
            "nesting deeper than 64 levels at byte 320");
  // inside a meta value, and with strings holding brackets before it
  const std::string meta = R"({"meta": {"s": "[[[{{{\"", "deep": )";
  EXPECT_EQ(load_error(meta + arrays),
            "nesting deeper than 64 levels at byte " + std::to_string(meta.size() + 62));
}

TEST(JsonDeep, SixtyFourLevelsLoadAndSixtyFiveDoNot) {
  // the root and meta are two levels: a meta value may nest 62 deep
  const auto doc = [](size_t value_depth) {
    return R"({"meta": {"v": )" + std::string(value_depth, '[') + std::string(value_depth, ']') +
           "}}";
  };
  const LoadResult ok = program_from_json(doc(62));
  ASSERT_TRUE(ok) << ok.error;
  const std::string out = program_to_json(*ok.program);
  EXPECT_EQ(program_to_json(load_ok(out)), out);
  EXPECT_EQ(load_error(doc(63)).rfind("nesting deeper than 64 levels at byte", 0), 0u);
  // a param value sits under 4 levels
  const auto task = [](size_t value_depth) {
    return with_tasks(R"({"id": 0, "op": "NOP", "inputs": [], "outputs": [], "out_counter": 0,
        "params": {"p": )" + std::string(value_depth, '[') + std::string(value_depth, ']') + "}}");
  };
  const LoadResult pok = program_from_json(task(60));
  ASSERT_TRUE(pok) << pok.error;
  const std::string pout = program_to_json(*pok.program);
  EXPECT_EQ(program_to_json(load_ok(pout)), pout);
  EXPECT_FALSE(program_from_json(task(61)));
}

TEST(JsonDeep, TooDeepTextInMemoryIsWrittenLoadably) {
  Program p;
  p.meta.emplace_back("deep", std::string(100, '[') + std::string(100, ']'));
  const std::string out = program_to_json(p);
  const Program back = load_ok(out);
  EXPECT_EQ(back.meta_string("deep"), p.meta[0].second);
}

TEST(JsonDeep, WideDocumentsOutsideRecordsAreBounded) {
  // Millions of values outside the streamed record arrays would be a DOM of gigabytes.
  std::string doc = R"({"meta": {"x": [)";
  const size_t n = (size_t{4} << 20) + 16;
  doc.reserve(doc.size() + 2 * n + 8);
  for (size_t i = 0; i < n; ++i) doc += "0,";
  doc += "0]}}";
  const std::string e = load_error(doc);
  EXPECT_NE(e.find("JSON values outside the buffers/counters/tasks records"), std::string::npos)
      << e;
}

// ---- files ------------------------------------------------------------------------------------

TEST(JsonFile, SaveThenLoad) {
  TempDir dir;
  std::mt19937_64 rng(11);
  const Program p = random_program(rng);
  const fs::path file = dir.path() / "p.json";
  std::string error;
  ASSERT_TRUE(save_program(p, file, &error)) << error;
  std::ifstream f(file, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), program_to_json(p) + "\n");
  const LoadResult r = load_program(file);
  ASSERT_TRUE(r) << r.error;
  EXPECT_EQ(program_to_json(*r.program), program_to_json(p));
  // the shared spec example, from disk
  EXPECT_TRUE(load_program(data_path("spec_example_complete.json")));
}

TEST(JsonFile, UnreadablePathsAreNamed) {
  TempDir dir;
  const fs::path missing = dir.path() / "nope.json";
  LoadResult r = load_program(missing);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error, "cannot load program " + missing.string() + ": no such file");
  r = load_program(dir.path());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error, "cannot load program " + dir.path().string() + ": is a directory, not a file");
  if (::geteuid() != 0) {  // root reads anything
    const fs::path locked = dir.path() / "locked.json";
    std::ofstream(locked) << "{}";
    fs::permissions(locked, fs::perms::none);
    r = load_program(locked);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error.find(locked.string()), std::string::npos);
    EXPECT_NE(r.error.find("Permission denied"), std::string::npos) << r.error;
  }
  const fs::path broken = dir.path() / "broken.json";
  std::ofstream(broken) << "{\"tasks\": [}";
  r = load_program(broken);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error.rfind(broken.string() + ": syntax error at byte 11", 0), 0u) << r.error;
  std::string error;
  EXPECT_FALSE(save_program(Program{}, dir.path() / "no" / "such" / "dir.json", &error));
  EXPECT_NE(error.find("cannot save program"), std::string::npos);
  EXPECT_NE(error.find("No such file or directory"), std::string::npos) << error;
}

TEST(JsonFile, FilesOverOneGibAreRefused) {
  TempDir dir;
  const fs::path big = dir.path() / "big.json";
  std::ofstream(big) << "{}";
  fs::resize_file(big, (uintmax_t{1} << 30) + 1);  // sparse: no disk is used
  const LoadResult r = load_program(big);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error.find("programs over 1 GiB are refused"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find(big.string()), std::string::npos);
}

// ---- meta strings -----------------------------------------------------------------------------

TEST(JsonMeta, SetAndGetStringsWithEscaping) {
  Program p;
  const std::string tricky = "q\"uote \\ back\nline \x01 \xc3\xa9 \xf0\x9f\x98\x80 </script>";
  p.set_meta_string("model", tricky);
  p.set_meta_string("gpu", "h100");
  ASSERT_EQ(p.meta.size(), 2u);
  EXPECT_EQ(p.meta[0].second,
            R"("q\"uote \\ back\nline \u0001 \u00e9 \ud83d\ude00 </script>")");
  EXPECT_EQ(p.meta_string("model"), tricky);
  p.set_meta_string("model", "second");  // replaced in place, order kept
  ASSERT_EQ(p.meta.size(), 2u);
  EXPECT_EQ(p.meta[0].first, "model");
  EXPECT_EQ(p.meta_string("model"), "second");
  p.meta.emplace_back("n", "42");
  EXPECT_FALSE(p.meta_string("n"));
  p.meta.emplace_back("bad", "\"unterminated");
  EXPECT_FALSE(p.meta_string("bad"));
  // stored text that is not JSON comes back as the string it was written as
  const Program back = load_ok(program_to_json(p));
  ASSERT_EQ(back.meta.size(), 4u);
  EXPECT_EQ(std::vector(back.meta.begin(), back.meta.begin() + 3),
            std::vector(p.meta.begin(), p.meta.begin() + 3));
  EXPECT_EQ(back.meta_string("bad"), "\"unterminated");
}

}  // namespace
}  // namespace amk
