// Program generators: a plain tiled chain and a Llama-style decoder with pages and SMs.
#include "support/program_gen.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>
#include <vector>

namespace amk::testing {

namespace {

// A finished stage: waiting on `counter` with threshold `producers` is its all-join.
struct Joined {
  int64_t counter = -1;
  int64_t producers = 0;
  Wait all() const { return {counter, producers}; }
};

// Emits tasks stage by stage and remembers, per buffer, the first stage writing it and the last
// stage using it: every stage waits on the whole previous one, so a buffer first written after
// another's last use is ordered after all of its uses, which is what page reuse needs.
class StagedBuilder {
 public:
  Program p;

  int64_t buffer(std::string name, BufferKind kind, std::vector<int64_t> shape,
                 std::optional<std::string> source = {}) {
    const MemSpace space =
        kind == BufferKind::ACTIVATION ? MemSpace::GLOBAL_SCRATCH : MemSpace::HBM;
    const int64_t id = p.new_buffer(std::move(name), kind, DType::BF16, std::move(shape), space,
                                    std::move(source));
    first_write_.push_back(-1);
    last_use_.push_back(-1);
    return id;
  }
  int64_t weight(const std::string& name, std::vector<int64_t> shape) {
    return buffer(name, BufferKind::WEIGHT, std::move(shape), name + ".weight");
  }
  int64_t act(const std::string& name, int64_t width) {
    return buffer(name, BufferKind::ACTIVATION, {1, width});
  }

  // Opens a stage: its tasks share one fresh counter.
  void begin(const std::string& note) {
    ++stage_;
    counter_ = p.new_counter(note);
    producers_ = 0;
  }
  Joined end() const { return {counter_, producers_}; }

  void task(Op op, std::vector<int64_t> in, std::vector<int64_t> out, std::vector<Wait> waits,
            Params params, std::string label, int64_t est_bytes = 0) {
    for (int64_t b : in) last_use_[static_cast<size_t>(b)] = stage_;
    for (int64_t b : out) {
      if (first_write_[static_cast<size_t>(b)] < 0) first_write_[static_cast<size_t>(b)] = stage_;
      last_use_[static_cast<size_t>(b)] = stage_;
    }
    Task& t = p.add_task(op, std::move(in), std::move(out), counter_, std::move(waits),
                         std::move(params), std::move(label));
    t.est_bytes = est_bytes;
    ++producers_;
  }

  // One stage of GEMV tiles over (weight [n, k], output [1, n]) pairs.
  struct Gemv {
    int64_t weight, out, n;
    std::string label;
  };
  Joined gemv(const std::string& note, int64_t x, int64_t k, const std::vector<Gemv>& gemvs,
              int64_t tile, Joined after) {
    begin(note);
    for (const Gemv& g : gemvs)
      for (int64_t off = 0; off < g.n; off += tile) {
        const int64_t nt = std::min(tile, g.n - off);
        task(Op::GEMV_TILE, {x, g.weight}, {g.out}, {after.all()},
             Params{{"K", ParamValue::integer(k)},
                    {"N_tile", ParamValue::integer(nt)},
                    {"n_off", ParamValue::integer(off)}},
             g.label + "[" + std::to_string(off / tile) + "]", k * nt * 2);
      }
    return end();
  }

  Joined single(const std::string& note, Op op, std::vector<int64_t> in, std::vector<int64_t> out,
                std::vector<Wait> waits, Params params) {
    begin(note);
    task(op, std::move(in), std::move(out), std::move(waits), std::move(params), note);
    return end();
  }

  // Graph-colouring-style reuse by stage: a page is handed to the next buffer of its size whose
  // first write comes strictly after the last use of the page's current occupant.
  void allocate_pages() {
    std::vector<int64_t> acts;
    for (size_t b = 0; b < p.buffers.size(); ++b)
      if (p.buffers[b].kind == BufferKind::ACTIVATION && first_write_[b] >= 0)
        acts.push_back(static_cast<int64_t>(b));
    std::stable_sort(acts.begin(), acts.end(), [&](int64_t a, int64_t b) {
      return first_write_[static_cast<size_t>(a)] < first_write_[static_cast<size_t>(b)];
    });
    PageAllocation pa;
    using Busy = std::pair<int64_t, int64_t>;  // (last use stage, page)
    std::priority_queue<Busy, std::vector<Busy>, std::greater<>> busy;
    std::map<int64_t, std::vector<int64_t>> free_by_size;
    for (int64_t b : acts) {
      const int64_t fw = first_write_[static_cast<size_t>(b)];
      while (!busy.empty() && busy.top().first < fw) {
        const int64_t page = busy.top().second;
        busy.pop();
        free_by_size[pa.pages[static_cast<size_t>(page)].nbytes].push_back(page);
      }
      const int64_t nbytes = p.buffers[static_cast<size_t>(b)].nbytes();
      auto& pool = free_by_size[nbytes];
      int64_t page = -1;
      if (!pool.empty()) {
        page = pool.back();
        pool.pop_back();
      } else {
        page = static_cast<int64_t>(pa.pages.size());
        pa.pages.push_back(Page{page, MemSpace::GLOBAL_SCRATCH, nbytes, fw, fw});
      }
      Page& pg = pa.pages[static_cast<size_t>(page)];
      pg.live_end = std::max(pg.live_end, last_use_[static_cast<size_t>(b)]);
      pa.buffer_to_page.emplace_back(b, page);
      busy.emplace(last_use_[static_cast<size_t>(b)], page);
    }
    p.pages = std::move(pa);
  }

 private:
  int64_t stage_ = -1;
  int64_t counter_ = -1;
  int64_t producers_ = 0;
  std::vector<int64_t> first_write_, last_use_;
};

Params ints(std::initializer_list<std::pair<const char*, int64_t>> kv) {
  Params p;
  for (const auto& [k, v] : kv) p.set_int(k, v);
  return p;
}

}  // namespace

Program make_tiled_chain(int64_t layers, int64_t tiles) {
  constexpr int64_t kTile = 16;
  StagedBuilder b;
  const int64_t width = tiles * kTile;
  int64_t x = b.buffer("x", BufferKind::IO_INPUT, {1, width});
  Joined prev;
  for (int64_t l = 0; l < layers; ++l) {
    const bool last = l + 1 == layers;
    const std::string name = "h" + std::to_string(l);
    const int64_t w = b.weight("layer" + std::to_string(l) + ".w", {width, width});
    const int64_t out =
        last ? b.buffer("out", BufferKind::IO_OUTPUT, {1, width}) : b.act(name, width);
    std::vector<Wait> waits;
    if (prev.counter >= 0) waits.push_back(prev.all());
    b.begin(name);
    for (int64_t t = 0; t < tiles; ++t)
      b.task(Op::GEMV_TILE, {x, w}, {out}, waits,
             ints({{"K", width}, {"N_tile", kTile}, {"n_off", t * kTile}}),
             name + "[" + std::to_string(t) + "]", width * kTile * 2);
    prev = b.end();
    x = out;
  }
  return std::move(b.p);
}

int64_t decoder_tasks_per_layer(const DecoderGenOptions& o) {
  auto tiles = [&](int64_t n) { return (n + o.gemv_tile - 1) / o.gemv_tile; };
  const int64_t q = o.n_heads * o.head_dim, kv = o.n_kv_heads * o.head_dim;
  return 1 + tiles(q) + 2 * tiles(kv) + 2 + 2 + o.attn_splits + 1 + tiles(o.hidden) + 1 + 1 +
         2 * tiles(o.ffn) + 1 + tiles(o.hidden) + 1;
}

DecoderGenOptions decoder_options_for_tasks(int64_t tasks, DecoderGenOptions base) {
  base.layers = std::max<int64_t>(1, tasks / decoder_tasks_per_layer(base));
  return base;
}

Program make_decoder(const DecoderGenOptions& o) {
  StagedBuilder b;
  const int64_t H = o.hidden, q_dim = o.n_heads * o.head_dim, kv_dim = o.n_kv_heads * o.head_dim;
  const double eps = 1e-5, theta = 500000.0;
  auto norm_params = [&] {
    Params p;
    p.set_real("eps", eps);
    p.set_int("hidden", H);
    return p;
  };

  const int64_t ids = b.buffer("input_ids", BufferKind::IO_INPUT, {1});
  const int64_t embed_w = b.weight("model.embed_tokens", {o.vocab, H});
  const int64_t rope_table = b.buffer("rope_cos_sin", BufferKind::CONST, {o.max_seq, o.head_dim});
  int64_t x = b.act("x0", H);
  Joined prev = b.single("embed", Op::EMBED, {ids, embed_w}, {x}, {}, ints({{"hidden", H}}));

  for (int64_t l = 0; l < o.layers; ++l) {
    const std::string L = "L" + std::to_string(l) + ".";
    const std::string W = "model.layers." + std::to_string(l) + ".";
    const int64_t wn1 = b.weight(W + "input_layernorm", {H});
    const int64_t wq = b.weight(W + "self_attn.q_proj", {q_dim, H});
    const int64_t wk = b.weight(W + "self_attn.k_proj", {kv_dim, H});
    const int64_t wv = b.weight(W + "self_attn.v_proj", {kv_dim, H});
    const int64_t wo = b.weight(W + "self_attn.o_proj", {H, q_dim});
    const int64_t wn2 = b.weight(W + "post_attention_layernorm", {H});
    const int64_t wg = b.weight(W + "mlp.gate_proj", {o.ffn, H});
    const int64_t wu = b.weight(W + "mlp.up_proj", {o.ffn, H});
    const int64_t wd = b.weight(W + "mlp.down_proj", {H, o.ffn});
    const int64_t kcache =
        b.buffer(L + "k_cache", BufferKind::KV_CACHE, {o.n_kv_heads, o.max_seq, o.head_dim});
    const int64_t vcache =
        b.buffer(L + "v_cache", BufferKind::KV_CACHE, {o.n_kv_heads, o.max_seq, o.head_dim});

    const int64_t h1 = b.act(L + "h_attn_norm", H);
    const int64_t q = b.act(L + "q", q_dim), k = b.act(L + "k", kv_dim), v = b.act(L + "v", kv_dim);
    const int64_t q_rot = b.act(L + "q_rot", q_dim), k_rot = b.act(L + "k_rot", kv_dim);
    const int64_t attn = b.act(L + "attn", q_dim);
    const int64_t o_out = b.act(L + "o", H), x1 = b.act(L + "x_mid", H);
    const int64_t h2 = b.act(L + "h_mlp_norm", H);
    const int64_t g = b.act(L + "gate", o.ffn), u = b.act(L + "up", o.ffn),
                  s = b.act(L + "act", o.ffn);
    const int64_t d = b.act(L + "down", H), x2 = b.act(L + "x_out", H);

    prev = b.single(L + "attn_norm", Op::RMSNORM, {x, wn1}, {h1}, {prev.all()}, norm_params());
    prev = b.gemv(L + "qkv", h1, H,
                  {{wq, q, q_dim, L + "q_proj"},
                   {wk, k, kv_dim, L + "k_proj"},
                   {wv, v, kv_dim, L + "v_proj"}},
                  o.gemv_tile, prev);

    b.begin(L + "rope");
    Params rope;
    rope.set_int("head_dim", o.head_dim);
    rope.set_real("theta", theta);
    b.task(Op::ROPE, {q, rope_table}, {q_rot}, {prev.all()}, rope, L + "rope_q");
    b.task(Op::ROPE, {k, rope_table}, {k_rot}, {prev.all()}, rope, L + "rope_k");
    prev = b.end();

    // v is read two stages after the q/k/v join: ordered only through the rope stage.
    b.begin(L + "kv_append");
    b.task(Op::KV_APPEND, {k_rot, kcache}, {kcache}, {prev.all()}, ints({{"pos", o.pos}}),
           L + "append_k");
    b.task(Op::KV_APPEND, {v, vcache}, {vcache}, {prev.all()}, ints({{"pos", o.pos}}),
           L + "append_v");
    prev = b.end();

    // Split-KV attention: q_rot comes from the rope stage, two stages back.
    std::vector<int64_t> parts;
    for (int64_t i = 0; i < o.attn_splits; ++i)
      parts.push_back(b.act(L + "attn_part" + std::to_string(i), q_dim + 2 * o.n_heads));
    b.begin(L + "attention");
    const int64_t kv_len = o.pos + 1, split = (kv_len + o.attn_splits - 1) / o.attn_splits;
    for (int64_t i = 0; i < o.attn_splits; ++i) {
      Params ap = ints({{"head_dim", o.head_dim},
                        {"kv_start", std::min(i * split, kv_len)},
                        {"kv_len", std::max<int64_t>(0, std::min(split, kv_len - i * split))},
                        {"n_heads", o.n_heads},
                        {"n_kv_heads", o.n_kv_heads},
                        {"flags", 2}});  // partial: [acc | m | l] per head, for the combine
      ap.set_real("scale", 1.0 / std::sqrt(static_cast<double>(o.head_dim)));
      b.task(Op::ATTENTION_TILE, {q_rot, kcache, vcache}, {parts[static_cast<size_t>(i)]},
             {prev.all()}, ap, L + "attn[" + std::to_string(i) + "]");
    }
    prev = b.end();
    prev = b.single(L + "attn_combine", Op::ATTENTION_COMBINE, parts, {attn}, {prev.all()}, {});
    prev = b.gemv(L + "o_proj", attn, q_dim, {{wo, o_out, H, L + "o_proj"}}, o.gemv_tile, prev);
    // The residual x was written by the previous layer's last add: many stages back.
    prev = b.single(L + "residual_attn", Op::ADD, {x, o_out}, {x1}, {prev.all()}, {});
    prev = b.single(L + "mlp_norm", Op::RMSNORM, {x1, wn2}, {h2}, {prev.all()}, norm_params());
    prev = b.gemv(L + "gate_up", h2, H, {{wg, g, o.ffn, L + "gate"}, {wu, u, o.ffn, L + "up"}},
                  o.gemv_tile, prev);
    prev = b.single(L + "silu_mul", Op::SILU_MUL, {g, u}, {s}, {prev.all()}, {});
    prev = b.gemv(L + "down", s, o.ffn, {{wd, d, H, L + "down"}}, o.gemv_tile, prev);
    prev = b.single(L + "residual_mlp", Op::ADD, {x1, d}, {x2}, {prev.all()}, {});
    x = x2;
  }

  const int64_t wnf = b.weight("model.norm", {H});
  const int64_t wlm = b.weight("lm_head", {o.vocab, H});
  const int64_t hf = b.act("h_final", H);
  const int64_t logits = b.act("logits", o.vocab);
  const int64_t token = b.buffer("next_token", BufferKind::IO_OUTPUT, {1});
  prev = b.single("final_norm", Op::RMSNORM, {x, wnf}, {hf}, {prev.all()}, norm_params());
  prev = b.gemv("lm_head", hf, H, {{wlm, logits, o.vocab, "lm_head"}}, o.lm_head_tile, prev);
  b.single("argmax", Op::SAMPLE_ARGMAX, {logits}, {token}, {prev.all()}, {});

  Program& p = b.p;
  if (o.pages) b.allocate_pages();
  if (o.num_sms > 0)
    for (size_t t = 0; t < p.tasks.size(); ++t) p.tasks[t].sm = static_cast<int64_t>(t) % o.num_sms;
  if (const GpuTarget* t = o.target.empty() ? nullptr : find_target(o.target)) {
    p.target = *t;
    p.set_meta_string("gpu", t->name);
  }
  p.set_meta_string("model", "synthetic-decoder");
  return std::move(b.p);
}

DecoderGenOptions small_decoder_options(int64_t layers) {
  DecoderGenOptions o;
  o.layers = layers;
  o.hidden = 64;
  o.ffn = 128;
  o.n_heads = 4;
  o.n_kv_heads = 2;
  o.head_dim = 16;
  o.gemv_tile = 16;
  o.attn_splits = 2;
  o.vocab = 64;
  o.lm_head_tile = 32;
  return o;
}

}  // namespace amk::testing
