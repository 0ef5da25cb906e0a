// FastCpuDecoder (amk/cpu_decoder.h): one decode step of a Llama-family model, written directly
// from the model (the lowering's op list, in the order Hugging Face's modeling code runs it),
// over weights prepared once into contiguous matrices.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>

#include "amk/cpu_decoder.h"
#include "amk/lowering.h"
#include "amk/rope.h"
#include "amk/tensor.h"
#include "runtime/cpu_attention.h"
#include "runtime/cpu_matrix.h"
#include "runtime/cpu_worker_pool.h"
#include "runtime/terminal_progress.h"

namespace amk {

namespace {

// The WEIGHT dtype a lowering of this checkpoint gives a tensor stored as `t` (nullopt for a
// dtype the lowering does not take as stored): make_cpu_decoder's reference program and the
// fast decoder's cache rounding both follow the embedding's.
std::optional<DType> lowered_weight_dtype(const TensorView& t) {
  switch (t.dtype) {
    case StDType::F32: return DType::F32;
    case StDType::F16: return DType::F16;
    case StDType::BF16: return DType::BF16;
    default: return std::nullopt;
  }
}

// GEMV rows are claimed by threads in multiples of this many, so two threads never write one
// cache line of the output (16 floats = 64 bytes).
constexpr int64_t kRowBlock = 16;

std::vector<float> vector_of(const Checkpoint& ck, const std::string& name, int64_t n) {
  return ck.tensor(name, std::vector<int64_t>{n}).to_floats();
}

// RMSNorm as the reference computes it: the mean square and the scaling in double, rounded once.
void rms_norm(const float* x, const float* weight, int64_t n, double eps, float* out) {
  double sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) sum_sq += double(x[i]) * double(x[i]);
  const double inv_rms = 1.0 / std::sqrt(sum_sq / double(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = float(double(x[i]) * inv_rms * double(weight[i]));
}

// Rotate-half RoPE of one head in place: (x[i], x[i + half]) turned by the angle whose cosine
// and sine are cos[i], sin[i]; in double, rounded once, as the reference's ROPE.
void rotate_half(float* x, const double* cos, const double* sin, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const double a = x[i], b = x[i + half];
    x[i] = float(a * cos[i] - b * sin[i]);
    x[i + half] = float(b * cos[i] + a * sin[i]);
  }
}

// torch.argmax's order (the reference's SAMPLE_ARGMAX): NaN above every number, ties to the
// first index.
int64_t argmax_of(const std::vector<float>& v) {
  int64_t best = 0;
  for (int64_t i = 1; i < int64_t(v.size()); ++i) {
    const float a = v[size_t(i)], b = v[size_t(best)];
    if (std::isnan(b)) break;
    if (std::isnan(a) || a > b) best = i;
  }
  return best;
}

}  // namespace

struct FastCpuDecoder::Model {
  struct Layer {
    std::vector<float> attn_norm, mlp_norm, q_norm, k_norm;  // head norms: Qwen3 only
    CpuMatrix qkv;                     // rows: q (q_dim), k (kv_dim), v (kv_dim)
    std::vector<float> qkv_bias;       // empty without biases
    CpuMatrix o;
    std::vector<float> o_bias;
    CpuMatrix gate_up;                 // rows gate_0, up_0, gate_1, up_1, ...
    std::vector<float> gate_up_bias;   // interleaved alike
    CpuMatrix down;
    std::vector<float> down_bias;
  };

  ModelConfig config;
  std::vector<Layer> layers;
  CpuMatrix embed;
  CpuMatrix lm_head_own;       // empty when tied
  const CpuMatrix* lm_head = nullptr;
  std::vector<float> final_norm;
  std::vector<float> inv_freq;  // amk/rope.h's float32 table, as the reference's ROPE reads it
  CpuWorkerPool pool;

  // [layer][kv_head][position][head_dim]; values rounded to BF16 when the lowered program's
  // caches would be BF16 (kv_cache_dtype of the weights), so both attend over the same numbers.
  std::vector<float> k_cache, v_cache;
  bool kv_bf16 = false;
  int64_t cache_rows_used = 0;  // rows [0, this) of every head may be non-zero

  // Activations of one step.
  std::vector<float> x, xn, qkv, attn, gate_up, act, logits;
  std::vector<double> cos, sin;
  std::vector<std::vector<float>> scores;  // per thread, max_context values

  explicit Model(int threads) : pool(threads) {}

  float* cache_head(std::vector<float>& cache, int64_t layer, int64_t kv_head, int64_t T) {
    const int64_t NKV = config.num_key_value_heads, HD = config.head_dim;
    return cache.data() + ((layer * NKV + kv_head) * T) * HD;
  }
  float cached(float v) const { return kv_bf16 ? round_to_dtype(DType::BF16, v) : v; }
  void store_row(float* dst, const float* src, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) dst[i] = cached(src[i]);
  }
};

FastCpuDecoder::FastCpuDecoder(const Checkpoint& checkpoint, int64_t max_context,
                               const CpuDecoderOptions& options) {
  const ModelConfig& c = checkpoint.config();
  if (max_context < 1)
    throw DecodeError(fmt::format("max_context must be >= 1, got {}", max_context));
  check_max_context(c, max_context);
  if (c.hidden_act != "silu")  // parse_model_config refuses the rest; kept for a hand-made config
    throw UnsupportedModelError(fmt::format("hidden_act '{}' (the CPU decoder runs SiLU)", c.hidden_act));
  const int threads = options.threads > 0
                          ? options.threads
                          : int(std::max(1u, std::thread::hardware_concurrency()));
  model_ = std::make_unique<Model>(threads);
  Model& m = *model_;
  m.config = c;
  max_context_ = max_context;
  // One format per matrix: bf16 when asked for, or when every part is stored bf16 already.
  const auto format = [&](std::initializer_list<const TensorView*> parts) {
    if (options.weights == CpuWeights::F32) return CpuWeightFormat::F32;
    if (options.weights == CpuWeights::BF16) return CpuWeightFormat::BF16;
    for (const TensorView* t : parts)
      if (t->dtype != StDType::BF16) return CpuWeightFormat::F32;
    return CpuWeightFormat::BF16;
  };

  const int64_t H = c.hidden_size, QD = c.q_dim(), KVD = c.kv_dim(), F = c.intermediate_size;
  const int64_t HD = c.head_dim, V = c.vocab_size, L = c.num_hidden_layers;
  const auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) -> const TensorView& {
    return checkpoint.tensor(name, std::vector<int64_t>{rows, cols});
  };

  TerminalProgress progress("preparing weights for the CPU", L + 1, options.show_progress);
  const TensorView& embed = matrix("model.embed_tokens.weight", V, H);
  m.embed = CpuMatrix::from_tensor(embed, format({&embed}));
  // The weights' dtype as a lowering of this checkpoint sees it (make_cpu_decoder's reference
  // program takes the embedding's as stored), hence the caches': not the CPU storage option,
  // which only changes how the products are computed.
  m.kv_bf16 = kv_cache_dtype(lowered_weight_dtype(embed).value_or(DType::F32)) == DType::BF16;
  for (int64_t l = 0; l < L; ++l) {
    progress.update(l);
    const std::string p = fmt::format("model.layers.{}.", l);
    Model::Layer layer;
    layer.attn_norm = vector_of(checkpoint, p + "input_layernorm.weight", H);
    layer.mlp_norm = vector_of(checkpoint, p + "post_attention_layernorm.weight", H);
    if (c.qk_norm) {
      layer.q_norm = vector_of(checkpoint, p + "self_attn.q_norm.weight", HD);
      layer.k_norm = vector_of(checkpoint, p + "self_attn.k_norm.weight", HD);
    }
    const TensorView* qkv[] = {&matrix(p + "self_attn.q_proj.weight", QD, H),
                               &matrix(p + "self_attn.k_proj.weight", KVD, H),
                               &matrix(p + "self_attn.v_proj.weight", KVD, H)};
    layer.qkv = CpuMatrix::stacked(qkv, format({qkv[0], qkv[1], qkv[2]}));
    if (c.attention_qkv_bias)
      for (const auto& [name, n] : std::initializer_list<std::pair<const char*, int64_t>>{
               {"q_proj", QD}, {"k_proj", KVD}, {"v_proj", KVD}}) {
        const std::vector<float> b = vector_of(checkpoint, p + "self_attn." + name + ".bias", n);
        layer.qkv_bias.insert(layer.qkv_bias.end(), b.begin(), b.end());
      }
    const TensorView& o = matrix(p + "self_attn.o_proj.weight", H, QD);
    layer.o = CpuMatrix::from_tensor(o, format({&o}));
    if (c.attention_out_bias) layer.o_bias = vector_of(checkpoint, p + "self_attn.o_proj.bias", H);
    const TensorView& gate = matrix(p + "mlp.gate_proj.weight", F, H);
    const TensorView& up = matrix(p + "mlp.up_proj.weight", F, H);
    layer.gate_up = CpuMatrix::interleaved(gate, up, format({&gate, &up}));
    const TensorView& down = matrix(p + "mlp.down_proj.weight", H, F);
    layer.down = CpuMatrix::from_tensor(down, format({&down}));
    if (c.mlp_bias) {
      const std::vector<float> g = vector_of(checkpoint, p + "mlp.gate_proj.bias", F);
      const std::vector<float> u = vector_of(checkpoint, p + "mlp.up_proj.bias", F);
      for (int64_t i = 0; i < F; ++i) {
        layer.gate_up_bias.push_back(g[size_t(i)]);
        layer.gate_up_bias.push_back(u[size_t(i)]);
      }
      layer.down_bias = vector_of(checkpoint, p + "mlp.down_proj.bias", H);
    }
    m.layers.push_back(std::move(layer));
  }
  progress.update(L);
  m.final_norm = vector_of(checkpoint, "model.norm.weight", H);
  if (c.tie_word_embeddings) {
    m.lm_head = &m.embed;
  } else {
    const TensorView& lm_head = matrix("lm_head.weight", V, H);
    m.lm_head_own = CpuMatrix::from_tensor(lm_head, format({&lm_head}));
    m.lm_head = &m.lm_head_own;
  }
  m.inv_freq = rope_inv_freq_f32(c);

  const size_t cache = size_t(L * c.num_key_value_heads * max_context * HD);
  m.k_cache.assign(cache, 0.0f);
  m.v_cache.assign(cache, 0.0f);
  m.x.resize(size_t(H));
  m.xn.resize(size_t(H));
  m.qkv.resize(size_t(QD + 2 * KVD));
  m.attn.resize(size_t(QD));
  m.gate_up.resize(size_t(2 * F));
  m.act.resize(size_t(F));
  m.logits.resize(size_t(V));
  m.cos.resize(size_t(HD / 2));
  m.sin.resize(size_t(HD / 2));
  m.scores.assign(size_t(threads), std::vector<float>(size_t(max_context)));
}

FastCpuDecoder::~FastCpuDecoder() = default;

int64_t FastCpuDecoder::vocab_size() const { return model_->config.vocab_size; }
int FastCpuDecoder::threads() const { return model_->pool.size(); }

int64_t FastCpuDecoder::weight_bytes_per_token() const {
  const Model& m = *model_;
  int64_t bytes = m.lm_head->bytes();
  for (const Model::Layer& l : m.layers)
    bytes += l.qkv.bytes() + l.o.bytes() + l.gate_up.bytes() + l.down.bytes();
  return bytes;
}

std::vector<float> FastCpuDecoder::step(int64_t token) {
  Model& m = *model_;
  const ModelConfig& c = m.config;
  if (token < 0 || token >= c.vocab_size)
    throw DecodeError(
        fmt::format("token {} is outside the vocabulary [0, {})", token, c.vocab_size));
  if (position_ >= max_context_)
    throw DecodeError(
        fmt::format("position {} is past the decoder's max_context {}", position_, max_context_));
  const int64_t H = c.hidden_size, QD = c.q_dim(), KVD = c.kv_dim(), F = c.intermediate_size;
  const int64_t HD = c.head_dim, half = HD / 2, NH = c.num_attention_heads;
  const int64_t NKV = c.num_key_value_heads, group = NH / NKV, T = max_context_;
  const int64_t pos = position_, len = pos + 1;
  const double eps = c.rms_norm_eps;
  const int members = m.pool.size();
  // The reference's ROPE angle: float32 position times the float32 table, a float32 product.
  for (int64_t i = 0; i < half; ++i) {
    const auto angle = double(float(pos) * m.inv_freq[size_t(i)]);
    m.cos[size_t(i)] = std::cos(angle);
    m.sin[size_t(i)] = std::sin(angle);
  }
  const float scale = float(1.0 / std::sqrt(double(HD)));
  // A GEMV's rows in chunks of whole 16-row blocks (two threads never write one cache line of
  // the output), about 16 per thread: small enough that a thread preempted inside one delays
  // the step little, large enough that claiming them costs nothing.
  const auto row_chunk = [&](int64_t rows) {
    const int64_t per = rows / (int64_t(members) * 16);
    return std::max<int64_t>(kRowBlock, (per + kRowBlock - 1) / kRowBlock * kRowBlock);
  };
  const auto bias_or_null = [](const std::vector<float>& b) {
    return b.empty() ? nullptr : b.data();
  };

  m.embed.copy_row(token, m.x.data());
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const Model::Layer& w = m.layers[size_t(l)];
    rms_norm(m.x.data(), w.attn_norm.data(), H, eps, m.xn.data());
    m.pool.parallel_for(QD + 2 * KVD, row_chunk(QD + 2 * KVD), [&](int64_t b, int64_t e, int) {
      w.qkv.multiply_rows(m.xn.data(), bias_or_null(w.qkv_bias), m.qkv.data(), b, e, false);
    });
    float* q = m.qkv.data();
    float* k = q + QD;
    const float* v = k + KVD;
    for (int64_t h = 0; h < NH; ++h) {
      if (c.qk_norm) rms_norm(q + h * HD, w.q_norm.data(), HD, eps, q + h * HD);
      rotate_half(q + h * HD, m.cos.data(), m.sin.data(), half);
    }
    for (int64_t g = 0; g < NKV; ++g) {
      if (c.qk_norm) rms_norm(k + g * HD, w.k_norm.data(), HD, eps, k + g * HD);
      rotate_half(k + g * HD, m.cos.data(), m.sin.data(), half);
      m.store_row(m.cache_head(m.k_cache, l, g, T) + pos * HD, k + g * HD, HD);
      m.store_row(m.cache_head(m.v_cache, l, g, T) + pos * HD, v + g * HD, HD);
    }
    m.pool.parallel_for(NH, 1, [&](int64_t b, int64_t e, int member) {
      for (int64_t h = b; h < e; ++h)
        attend_one_head(q + h * HD, m.cache_head(m.k_cache, l, h / group, T),
                        m.cache_head(m.v_cache, l, h / group, T), len, HD, scale,
                        m.scores[size_t(member)].data(), m.attn.data() + h * HD);
    });
    // The residual is the GEMV's accumulator: x += o_proj(attn).
    m.pool.parallel_for(H, row_chunk(H), [&](int64_t b, int64_t e, int) {
      w.o.multiply_rows(m.attn.data(), bias_or_null(w.o_bias), m.x.data(), b, e, true);
    });
    rms_norm(m.x.data(), w.mlp_norm.data(), H, eps, m.xn.data());
    // Gate and up rows are interleaved, so each thread finishes SwiGLU on its own rows.
    m.pool.parallel_for(2 * F, row_chunk(2 * F), [&](int64_t b, int64_t e, int) {
      w.gate_up.multiply_rows(m.xn.data(), bias_or_null(w.gate_up_bias), m.gate_up.data(), b, e,
                              false);
      for (int64_t i = b / 2; i < e / 2; ++i) {
        const float gate = m.gate_up[size_t(2 * i)], up = m.gate_up[size_t(2 * i + 1)];
        m.act[size_t(i)] = gate / (1.0f + std::exp(-gate)) * up;
      }
    });
    m.pool.parallel_for(H, row_chunk(H), [&](int64_t b, int64_t e, int) {
      w.down.multiply_rows(m.act.data(), bias_or_null(w.down_bias), m.x.data(), b, e, true);
    });
  }
  rms_norm(m.x.data(), m.final_norm.data(), H, eps, m.xn.data());
  m.pool.parallel_for(c.vocab_size, row_chunk(c.vocab_size), [&](int64_t b, int64_t e, int) {
    m.lm_head->multiply_rows(m.xn.data(), nullptr, m.logits.data(), b, e, false);
  });
  next_token_ = argmax_of(m.logits);
  m.cache_rows_used = std::max(m.cache_rows_used, len);
  ++position_;
  return m.logits;
}

int64_t FastCpuDecoder::last_next_token() const {
  if (next_token_ < 0) throw DecodeError("no step has run yet");
  return next_token_;
}

void FastCpuDecoder::reset() {
  Model& m = *model_;
  const ModelConfig& c = m.config;
  // Only rows a step or a seek wrote can be non-zero: clearing those is enough.
  const int64_t HD = c.head_dim;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (int64_t g = 0; g < c.num_key_value_heads; ++g) {
      std::fill_n(m.cache_head(m.k_cache, l, g, max_context_), m.cache_rows_used * HD, 0.0f);
      std::fill_n(m.cache_head(m.v_cache, l, g, max_context_), m.cache_rows_used * HD, 0.0f);
    }
  m.cache_rows_used = 0;
  position_ = 0;
  next_token_ = -1;
}

void FastCpuDecoder::seek(int64_t position, uint64_t seed) {
  if (position < 0 || position >= max_context_)
    throw DecodeError(fmt::format("seek to position {}: outside [0, {})", position, max_context_));
  reset();
  Model& m = *model_;
  const ModelConfig& c = m.config;
  const int64_t HD = c.head_dim, NKV = c.num_key_value_heads;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (const char which : {'k', 'v'}) {
      // seeded_kv_state's values, keyed by the logical element (t, g, d).
      const SeededKvValues seeded(kv_cache_name(l, which), seed);
      std::vector<float>& cache = which == 'k' ? m.k_cache : m.v_cache;
      for (int64_t g = 0; g < NKV; ++g) {
        float* head = m.cache_head(cache, l, g, max_context_);
        for (int64_t t = 0; t < position; ++t)
          for (int64_t d = 0; d < HD; ++d)
            head[t * HD + d] = m.cached(seeded.at(t, g, d, NKV, HD));
      }
    }
  m.cache_rows_used = position;
  position_ = position;
}

std::unique_ptr<Decoder> make_cpu_decoder(const Checkpoint& checkpoint, int64_t max_context,
                                          CpuDecoderKind kind, const CpuDecoderOptions& options) {
  if (kind == CpuDecoderKind::Fast)
    return std::make_unique<FastCpuDecoder>(checkpoint, max_context, options);
  const ModelConfig& c = checkpoint.config();
  const GpuTarget& target = *find_target("h100");
  std::optional<DType> weight_dtype;
  if (const TensorView* e = checkpoint.find("model.embed_tokens.weight"))
    weight_dtype = lowered_weight_dtype(*e);
  return std::make_unique<ReferenceDecoder>(
      checkpoint, lower(c, default_schedule_config(c, target, max_context), target, max_context,
                        weight_dtype));
}

}  // namespace amk
