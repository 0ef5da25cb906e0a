// The ReferenceVM, checked against an independent double-precision Llama step and on every
// status it can report.
#include "amk/reference_vm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "amk/tensor.h"
#include "amk/validate.h"
#include "support/llama_block.h"

namespace amk {
namespace {

using testing::build_llama_block;
using testing::buffer_id;
using testing::LlamaBlockShape;
namespace nm = testing::llama_names;
using Status = VmRunResult::Status;

// ---- random weights, shared by the VM and the direct computation -----------------------------
using Weights = std::map<std::string, std::vector<float>, std::less<>>;

Weights make_weights(const LlamaBlockShape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto uniform = [&](int64_t count, double center, double half_width) {
    std::uniform_real_distribution<double> u(center - half_width, center + half_width);
    std::vector<float> v(static_cast<size_t>(count));
    for (float& x : v) x = static_cast<float>(u(rng));
    return v;
  };
  // Projections scaled by 1/sqrt(K) so every activation stays O(1); norm weights around 1.
  const auto proj = [&](int64_t n, int64_t k) {
    return uniform(n * k, 0.0, std::sqrt(3.0 / static_cast<double>(k)));
  };
  const int64_t H = s.hidden, QD = s.n_heads * s.head_dim, KVD = s.n_kv_heads * s.head_dim;
  Weights w;
  w[std::string(nm::kEmbed)] = uniform(s.vocab * H, 0.0, 1.0);
  w[std::string(nm::kAttnNorm)] = uniform(H, 1.0, 0.2);
  w[std::string(nm::kWq)] = proj(QD, H);
  w[std::string(nm::kWk)] = proj(KVD, H);
  w[std::string(nm::kWv)] = proj(KVD, H);
  w[std::string(nm::kWo)] = proj(H, QD);
  w[std::string(nm::kMlpNorm)] = uniform(H, 1.0, 0.2);
  w[std::string(nm::kWgate)] = proj(s.ffn, H);
  w[std::string(nm::kWup)] = proj(s.ffn, H);
  w[std::string(nm::kWdown)] = proj(H, s.ffn);
  w[std::string(nm::kFinalNorm)] = uniform(H, 1.0, 0.2);
  w[std::string(nm::kLmHead)] = proj(s.vocab, H);
  return w;
}

// ---- the direct computation: plain double loops, written from the model's definition ---------
class DirectLlama {
 public:
  DirectLlama(const LlamaBlockShape& s, const Weights& w) : s_(s) {
    for (const auto& [name, values] : w) w_[name] = std::vector<double>(values.begin(), values.end());
    const auto cache = static_cast<size_t>(s.max_seq * s.n_kv_heads * s.head_dim);
    k_cache_.assign(cache, 0.0);
    v_cache_.assign(cache, 0.0);
  }

  std::vector<double> step(int64_t token, int64_t pos) {
    const int64_t H = s_.hidden, HD = s_.head_dim, NH = s_.n_heads, NKV = s_.n_kv_heads;
    const int64_t KVD = NKV * HD;
    const std::vector<double>& emb = w(nm::kEmbed);
    std::vector<double> x(emb.begin() + token * H, emb.begin() + (token + 1) * H);

    const std::vector<double> xn = rmsnorm(x, w(nm::kAttnNorm));
    std::vector<double> q = matvec(w(nm::kWq), xn);
    std::vector<double> k = matvec(w(nm::kWk), xn);
    const std::vector<double> v = matvec(w(nm::kWv), xn);
    rope(q, pos);
    rope(k, pos);
    std::copy(k.begin(), k.end(), k_cache_.begin() + pos * KVD);
    std::copy(v.begin(), v.end(), v_cache_.begin() + pos * KVD);

    // GQA: query head h reads KV head h / (NH / NKV); softmax over positions 0..pos.
    std::vector<double> attn(static_cast<size_t>(NH * HD), 0.0);
    const double scale = 1.0 / std::sqrt(static_cast<double>(HD));
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t kvh = h / (NH / NKV);
      std::vector<double> score(static_cast<size_t>(pos + 1));
      for (int64_t t = 0; t <= pos; ++t) {
        double dot = 0;
        for (int64_t d = 0; d < HD; ++d)
          dot += q[h * HD + d] * k_cache_[t * KVD + kvh * HD + d];
        score[t] = dot * scale;
      }
      const double m = *std::max_element(score.begin(), score.end());
      double denom = 0;
      for (double& e : score) denom += (e = std::exp(e - m));
      for (int64_t t = 0; t <= pos; ++t)
        for (int64_t d = 0; d < HD; ++d)
          attn[h * HD + d] += score[t] / denom * v_cache_[t * KVD + kvh * HD + d];
    }

    std::vector<double> h1 = matvec(w(nm::kWo), attn);
    for (int64_t i = 0; i < H; ++i) h1[i] += x[i];
    const std::vector<double> h1n = rmsnorm(h1, w(nm::kMlpNorm));
    const std::vector<double> gate = matvec(w(nm::kWgate), h1n);
    const std::vector<double> up = matvec(w(nm::kWup), h1n);
    std::vector<double> act(gate.size());
    for (size_t i = 0; i < act.size(); ++i) act[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
    std::vector<double> h2 = matvec(w(nm::kWdown), act);
    for (int64_t i = 0; i < H; ++i) h2[i] += h1[i];
    return matvec(w(nm::kLmHead), rmsnorm(h2, w(nm::kFinalNorm)));
  }

 private:
  const std::vector<double>& w(std::string_view name) const { return w_.at(std::string(name)); }

  // y = W x with W stored [N, K] (torch Linear layout).
  static std::vector<double> matvec(const std::vector<double>& W, const std::vector<double>& x) {
    const size_t K = x.size(), N = W.size() / K;
    std::vector<double> y(N, 0.0);
    for (size_t n = 0; n < N; ++n)
      for (size_t k = 0; k < K; ++k) y[n] += W[n * K + k] * x[k];
    return y;
  }

  std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<double>& g) const {
    double ss = 0;
    for (double e : x) ss += e * e;
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + s_.eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * g[i];
    return y;
  }

  // Rotate-half RoPE on every head of a flat [heads * head_dim] vector.
  void rope(std::vector<double>& x, int64_t pos) const {
    const int64_t HD = s_.head_dim, half = HD / 2;
    for (size_t base = 0; base < x.size(); base += static_cast<size_t>(HD)) {
      for (int64_t i = 0; i < half; ++i) {
        const double inv_freq = std::pow(s_.theta, -static_cast<double>(i) / half);
        const double c = std::cos(pos * inv_freq), sn = std::sin(pos * inv_freq);
        const double a = x[base + i], b = x[base + i + half];
        x[base + i] = a * c - b * sn;
        x[base + i + half] = b * c + a * sn;
      }
    }
  }

  LlamaBlockShape s_;
  std::map<std::string, std::vector<double>> w_;
  std::vector<double> k_cache_, v_cache_;
};

// ---- VM plumbing ---------------------------------------------------------------------------
void bind_weights(ReferenceVM& vm, const Weights& w, const Weights::key_type* skip = nullptr) {
  for (const Buffer& b : vm.program().buffers) {
    if (b.kind != BufferKind::WEIGHT || (skip && b.name == *skip)) continue;
    vm.set_buffer(b.id, Tensor::from_floats(b.dtype, b.shape, w.at(b.name)));
  }
}

void bind_inputs(ReferenceVM& vm, int64_t token, int64_t pos) {
  const int64_t tok[1] = {token}, p[1] = {pos};
  vm.set_buffer(buffer_id(vm.program(), nm::kToken), Tensor::from_ints(DType::I32, {1}, tok));
  vm.set_buffer(buffer_id(vm.program(), nm::kPos), Tensor::from_ints(DType::I32, {1}, p));
}

// Each position is its own program here (pos / kv_len are params), so the next step's VM takes
// the previous step's KV_CACHE contents, matched by name (set_buffer checks dtype and shape).
void carry_kv_cache(ReferenceVM& vm, const ReferenceVM& previous) {
  for (const Buffer& b : vm.program().buffers) {
    if (b.kind != BufferKind::KV_CACHE) continue;
    const Buffer* from = previous.find_buffer(b.name);
    if (from == nullptr || from->kind != BufferKind::KV_CACHE) continue;
    vm.set_buffer(b.id, previous.buffer(from->id));
  }
}

// A ready-to-run VM for one decode step, taking the KV cache of `previous` when given.
std::unique_ptr<ReferenceVM> step_vm(const LlamaBlockShape& s, const Weights& w, int64_t token,
                                     int64_t pos, const ReferenceVM* previous = nullptr) {
  auto vm = std::make_unique<ReferenceVM>(build_llama_block(s, pos));
  bind_weights(*vm, w);
  bind_inputs(*vm, token, pos);
  if (previous) carry_kv_cache(*vm, *previous);
  return vm;
}

const Tensor& named(const ReferenceVM& vm, std::string_view name) {
  return vm.buffer(buffer_id(vm.program(), name));
}

constexpr int64_t kTokens[] = {5, 17, 42, 9};

// ---- (a) the oracle against the direct computation ------------------------------------------
TEST(ReferenceVmLlama, BlockPassesValidate) {
  const Program p = build_llama_block({}, 0);
  const ValidationResult r = validate(p);
  EXPECT_TRUE(r.ok) << r.report();
  EXPECT_TRUE(r.warnings.empty()) << r.report();
  EXPECT_TRUE(simulate_adversarial(p).empty());
  for (const Task& t : p.tasks) EXPECT_TRUE(t.sm.has_value());
}

TEST(ReferenceVmLlama, MatchesDirectComputationOverFourDecodeSteps) {
  const LlamaBlockShape s;
  const Weights w = make_weights(s, 1234);
  DirectLlama direct(s, w);
  std::unique_ptr<ReferenceVM> vm;
  for (int64_t pos = 0; pos < 4; ++pos) {
    SCOPED_TRACE("pos " + std::to_string(pos));
    vm = step_vm(s, w, kTokens[pos], pos, vm.get());
    ASSERT_TRUE(vm->accepted()) << vm->validation().report();
    const VmRunResult r = vm->run();
    ASSERT_TRUE(r.ok()) << name_of(r.status) << ": " << r.message;
    EXPECT_EQ(r.fired.size(), vm->program().tasks.size());

    const std::vector<double> want = direct.step(kTokens[pos], pos);
    const std::vector<float> got = named(*vm, nm::kLogits).to_floats();
    ASSERT_EQ(got.size(), want.size());
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      max_err = std::max(max_err, std::abs(static_cast<double>(got[i]) - want[i]));
      max_ref = std::max(max_ref, std::abs(want[i]));
    }
    ASSERT_GT(max_ref, 0.0);
    EXPECT_LT(max_err / max_ref, 1e-5) << "max abs err " << max_err << ", max |logit| " << max_ref;

    const auto argmax = std::max_element(want.begin(), want.end()) - want.begin();
    EXPECT_EQ(named(*vm, nm::kNextToken).get_int(0), argmax);
  }
}

// ---- (b) random firing orders cannot change a race-free program's result ---------------------
struct StepBytes {
  std::vector<uint8_t> logits, token, k_cache, v_cache;
  bool operator==(const StepBytes&) const = default;
};

std::vector<StepBytes> decode(const LlamaBlockShape& s, const Weights& w, const VmOptions& opt,
                              std::vector<std::vector<int64_t>>* orders) {
  std::vector<StepBytes> out;
  std::unique_ptr<ReferenceVM> vm;
  for (int64_t pos = 0; pos < 3; ++pos) {
    vm = step_vm(s, w, kTokens[pos], pos, vm.get());
    const VmRunResult r = vm->run(opt);
    EXPECT_TRUE(r.ok()) << r.message;
    if (orders) orders->push_back(r.fired);
    out.push_back({named(*vm, nm::kLogits).bytes, named(*vm, nm::kNextToken).bytes,
                   named(*vm, nm::kKCache).bytes, named(*vm, nm::kVCache).bytes});
  }
  return out;
}

TEST(ReferenceVmLlama, RandomOrderIsBitIdenticalToListOrder) {
  const LlamaBlockShape s;
  const Weights w = make_weights(s, 99);
  std::vector<std::vector<int64_t>> list_orders;
  const std::vector<StepBytes> want = decode(s, w, {}, &list_orders);
  bool some_order_differs = false;
  for (uint64_t seed : {1u, 2u, 3u, 7u, 42u, 1000u}) {
    VmOptions opt;
    opt.order = VmOptions::Order::Random;
    opt.seed = seed;
    std::vector<std::vector<int64_t>> orders;
    EXPECT_TRUE(decode(s, w, opt, &orders) == want) << "seed " << seed;
    for (size_t i = 0; i < orders.size(); ++i) {
      std::vector<int64_t> sorted = orders[i];
      std::sort(sorted.begin(), sorted.end());
      std::vector<int64_t> listed = list_orders[i];
      std::sort(listed.begin(), listed.end());
      EXPECT_EQ(sorted, listed) << "each task fires exactly once";
      some_order_differs |= orders[i] != list_orders[i];
    }
  }
  EXPECT_TRUE(some_order_differs) << "Random order never deviated from list order";
}

TEST(ReferenceVmLlama, ListOrderFiresTheFirstReadyTask) {
  const Program p = build_llama_block({}, 0);
  ReferenceVM vm(p);
  bind_weights(vm, make_weights({}, 5));
  bind_inputs(vm, 1, 0);
  const VmRunResult r = vm.run();
  ASSERT_TRUE(r.ok()) << r.message;
  // The builder lists tasks topologically, so first-ready-in-list-order is the list itself.
  for (size_t i = 0; i < r.fired.size(); ++i) EXPECT_EQ(r.fired[i], p.tasks[i].id);
}

// ---- (c) refusal ----------------------------------------------------------------------------
TEST(ReferenceVm, RefusesARejectedProgramWithoutRunningAnything) {
  const LlamaBlockShape s;
  Program p = build_llama_block(s, 0);
  // argmax now waits for 3 of the 4 lm_head tiles: a first-k-of-N race validate() must reject.
  Task& argmax = p.tasks.back();
  ASSERT_EQ(argmax.op, Op::SAMPLE_ARGMAX);
  ASSERT_EQ(argmax.waits.size(), 1u);
  ASSERT_EQ(argmax.waits[0].threshold, 4);
  argmax.waits[0].threshold = 3;

  ReferenceVM vm(p);
  ASSERT_FALSE(vm.accepted());
  bind_weights(vm, make_weights(s, 1));
  bind_inputs(vm, 1, 0);
  const VmRunResult r = vm.run();
  EXPECT_EQ(r.status, Status::Rejected);
  EXPECT_TRUE(r.fired.empty());
  EXPECT_NE(r.message.find("rejected"), std::string::npos);
  ASSERT_FALSE(vm.validation().errors.empty());
  EXPECT_NE(r.message.find(vm.validation().errors.front()), std::string::npos) << r.message;
  EXPECT_THROW((void)named(vm, nm::kLogits), std::logic_error) << "nothing was allocated";
}

// ---- (d) the VM's own watchdogs (reachable only through the test-only path) ------------------
Program cyclic_program() {
  // t0 waits for t1's counter and t1 for t0's: validate() rejects the cycle.
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {4});
  const int64_t a = p.new_buffer("a", BufferKind::ACTIVATION, DType::F32, {4});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {4});
  const int64_t c0 = p.new_counter(), c1 = p.new_counter(), c2 = p.new_counter();
  p.add_task(Op::COPY, {x}, {a}, c0, {{c1, 1}}, {}, "first");
  p.add_task(Op::COPY, {a}, {y}, c1, {{c0, 1}}, {}, "second");
  p.add_task(Op::NOP, {}, {}, c2, {}, {}, "free");
  return p;
}

void bind_x(ReferenceVM& vm) {
  const float v[4] = {1, 2, 3, 4};
  vm.set_buffer(0, Tensor::from_floats(DType::F32, {4}, v));
}

TEST(ReferenceVm, DeadlockIsDetectedWhenNoTaskCanFire) {
  ReferenceVM vm(cyclic_program());
  bind_x(vm);
  EXPECT_EQ(vm.run().status, Status::Rejected) << "validate() must reject the cycle first";

  VmOptions opt;
  opt.testing_skip_validation = true;
  const VmRunResult r = vm.run(opt);
  EXPECT_EQ(r.status, Status::Deadlock);
  EXPECT_EQ(r.fired, std::vector<int64_t>{2}) << "the independent task still fires";
  EXPECT_NE(r.message.find("task 0 'first'"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("task 1 'second'"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("2 remain"), std::string::npos) << r.message;
}

TEST(ReferenceVm, WaitOnACounterNobodySignalsDeadlocks) {
  Program p;
  const int64_t c = p.new_counter(), orphan = p.new_counter("never signalled");
  p.add_task(Op::NOP, {}, {}, c, {{orphan, 1}}, {}, "starved");
  ReferenceVM vm(p);
  VmOptions opt;
  opt.testing_skip_validation = true;
  opt.order = VmOptions::Order::Random;
  const VmRunResult r = vm.run(opt);
  EXPECT_EQ(r.status, Status::Deadlock);
  EXPECT_NE(r.message.find("counter 1 is 0, needs 1"), std::string::npos) << r.message;
}

TEST(ReferenceVm, TimeoutIsCheckedBetweenTasks) {
  const LlamaBlockShape s;
  auto vm = step_vm(s, make_weights(s, 3), 1, 0);
  VmOptions opt;
  opt.timeout_s = 1e-9;
  const VmRunResult r = vm->run(opt);
  EXPECT_EQ(r.status, Status::Timeout);
  EXPECT_EQ(r.fired.size(), 1u) << "the watchdog fires right after the first task";
  EXPECT_NE(r.message.find("tasks left"), std::string::npos) << r.message;
}

// ---- (e) KV cache persistence ---------------------------------------------------------------
TEST(ReferenceVmLlama, KvCachePersistsAcrossRunsAndSteps) {
  const LlamaBlockShape s;
  const Weights w = make_weights(s, 77);
  auto vm0 = step_vm(s, w, 3, 0);
  const int64_t kc = buffer_id(vm0->program(), nm::kKCache);
  for (float v : vm0->buffer(kc).to_floats()) ASSERT_EQ(v, 0.0f) << "KV starts zeroed";
  // The cache is [n_kv_heads, max_seq, head_dim]: position t of every head.
  const auto position_of = [&](size_t element) {
    return int64_t(element) / s.head_dim % s.max_seq;
  };
  const auto any_nonzero_at = [&](const std::vector<float>& c, int64_t t) {
    for (size_t i = 0; i < c.size(); ++i)
      if (position_of(i) == t && c[i] != 0.0f) return true;
    return false;
  };

  // A marker in the last position of the last head: no task writes it, so it must survive.
  std::vector<float> planted(static_cast<size_t>(s.max_seq * s.n_kv_heads * s.head_dim), 0.0f);
  planted.back() = 123.0f;
  vm0->set_buffer(kc, Tensor::from_floats(s.dtype, {s.n_kv_heads, s.max_seq, s.head_dim}, planted));

  ASSERT_TRUE(vm0->run().ok());
  const std::vector<float> after_first = vm0->buffer(kc).to_floats();
  EXPECT_EQ(after_first.back(), 123.0f);
  EXPECT_TRUE(any_nonzero_at(after_first, 0)) << "position 0 written by KV_APPEND";
  for (size_t i = 0; i + 1 < after_first.size(); ++i)
    if (position_of(i) != 0) ASSERT_EQ(after_first[i], 0.0f) << i;
  ASSERT_TRUE(vm0->run().ok());
  EXPECT_EQ(vm0->buffer(kc).to_floats(), after_first) << "a second run keeps the cache";

  // The next position's VM takes the cache over, and its result depends on it.
  auto vm1 = step_vm(s, w, 8, 1, vm0.get());
  ASSERT_TRUE(vm1->run().ok());
  const std::vector<float> after_second = vm1->buffer(kc).to_floats();
  for (size_t i = 0; i < after_first.size(); ++i)
    if (position_of(i) == 0) ASSERT_EQ(after_second[i], after_first[i]) << i;
  EXPECT_TRUE(any_nonzero_at(after_second, 1));
  EXPECT_EQ(after_second.back(), 123.0f);

  auto cold = step_vm(s, w, 8, 1);  // same step, empty cache
  ASSERT_TRUE(cold->run().ok());
  EXPECT_NE(named(*cold, nm::kLogits).to_floats(), named(*vm1, nm::kLogits).to_floats());
}

// ---- (f) missing data and bad bindings ------------------------------------------------------
TEST(ReferenceVmLlama, MissingWeightIsReportedByName) {
  const LlamaBlockShape s;
  ReferenceVM vm(build_llama_block(s, 0));
  const std::string skip(nm::kLmHead);
  bind_weights(vm, make_weights(s, 1), &skip);
  bind_inputs(vm, 1, 0);
  const VmRunResult r = vm.run();
  EXPECT_EQ(r.status, Status::MissingData);
  EXPECT_TRUE(r.fired.empty());
  EXPECT_NE(r.message.find(skip), std::string::npos) << r.message;
}

TEST(ReferenceVmLlama, MissingInputIsReportedByName) {
  const LlamaBlockShape s;
  ReferenceVM vm(build_llama_block(s, 0));
  bind_weights(vm, make_weights(s, 1));
  const VmRunResult r = vm.run();
  EXPECT_EQ(r.status, Status::MissingData);
  EXPECT_NE(r.message.find("'token'"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("'pos'"), std::string::npos) << r.message;
}

TEST(ReferenceVmLlama, SetBufferChecksIdDtypeShapeAndKind) {
  const LlamaBlockShape s;
  ReferenceVM vm(build_llama_block(s, 0));
  const int64_t embed = buffer_id(vm.program(), nm::kEmbed);
  const std::vector<float> rows(static_cast<size_t>(s.vocab * s.hidden), 0.5f);
  EXPECT_THROW(vm.set_buffer(9999, Tensor::zeros(DType::F32, {1})), std::invalid_argument);
  EXPECT_THROW(vm.set_buffer(embed, Tensor::from_floats(DType::BF16, {s.vocab, s.hidden}, rows)),
               std::invalid_argument);
  EXPECT_THROW(vm.set_buffer(embed, Tensor::from_floats(DType::F32, {s.hidden, s.vocab}, rows)),
               std::invalid_argument);
  EXPECT_THROW(vm.set_buffer(buffer_id(vm.program(), "x"), Tensor::zeros(DType::F32, {1, s.hidden})),
               std::invalid_argument);
  try {
    vm.set_buffer(embed, Tensor::zeros(DType::F32, {s.vocab}));
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(nm::kEmbed), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(vm.set_buffer(embed, Tensor::from_floats(DType::F32, {s.vocab, s.hidden}, rows)));
  EXPECT_THROW((void)vm.buffer(-1), std::out_of_range);
}

// ---- (g) an op failure names its task ------------------------------------------------------
TEST(ReferenceVmLlama, OpErrorNamesTheTask) {
  const LlamaBlockShape s;
  auto vm = step_vm(s, make_weights(s, 1), s.vocab + 5, 0);  // token id past the table
  const VmRunResult r = vm->run();
  EXPECT_EQ(r.status, Status::OpError);
  EXPECT_TRUE(r.fired.empty());
  EXPECT_NE(r.message.find("task 0 'embed' (EMBED)"), std::string::npos) << r.message;
}

// ---- transient buffers are poisoned so a read before a write shows -------------------------
TEST(ReferenceVm, TransientBuffersStartAsNaN) {
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {4});
  const int64_t never = p.new_buffer("never_written", BufferKind::ACTIVATION, DType::F32, {4});
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {4});
  const int64_t id = p.new_buffer("id", BufferKind::IO_OUTPUT, DType::I32, {2});
  p.add_task(Op::ADD, {x, never}, {y}, p.new_counter(), {}, {}, "reads garbage");
  ReferenceVM vm(p);
  EXPECT_FALSE(vm.accepted()) << "validate() sees the read without a producer";
  bind_x(vm);
  VmOptions opt;
  opt.testing_skip_validation = true;
  const VmRunResult r = vm.run(opt);
  ASSERT_TRUE(r.ok()) << r.message;
  for (float v : vm.buffer(y).to_floats()) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(vm.buffer(id).get_int(0), INT32_MIN) << "integer outputs start at a sentinel";
}

// ---- size caps ----------------------------------------------------------------------------
TEST(ReferenceVm, AbsurdBufferIsRefusedNotAllocated) {
  Program p;
  const int64_t x = p.new_buffer("x", BufferKind::IO_INPUT, DType::F32, {4});
  p.new_buffer("huge", BufferKind::WEIGHT, DType::F32, {int64_t{1} << 20, int64_t{1} << 20},
               MemSpace::HBM, "huge");
  const int64_t y = p.new_buffer("y", BufferKind::IO_OUTPUT, DType::F32, {4});
  p.add_task(Op::COPY, {x}, {y}, p.new_counter(), {}, {}, "copy");
  ReferenceVM vm(p);
  ASSERT_TRUE(vm.accepted()) << vm.validation().report();
  const VmRunResult r = vm.run();
  EXPECT_EQ(r.status, Status::ResourceLimit);
  EXPECT_NE(r.message.find("'huge'"), std::string::npos) << r.message;
  EXPECT_TRUE(r.fired.empty());
}

TEST(ReferenceVm, StatusNames) {
  EXPECT_EQ(name_of(Status::Ok), "Ok");
  EXPECT_EQ(name_of(Status::Deadlock), "Deadlock");
  EXPECT_EQ(name_of(Status::MissingData), "MissingData");
  EXPECT_EQ(name_of(Status::ResourceLimit), "ResourceLimit");
}

}  // namespace
}  // namespace amk
