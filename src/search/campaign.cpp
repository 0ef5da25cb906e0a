#include "amk/campaign.h"

#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "amk/eval_worker.h"
#include "amk/hash.h"
#include "amk/json.h"
#include "amk/keep_revert.h"
#include "amk/lowering.h"
#include "amk/results_tsv.h"
#include "amk/schedule_config_io.h"
#include "amk/schedule_prior.h"
#include "amk/schedule_proposer.h"
#include "amk/timing_sim.h"

namespace amk::search {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Plateau: this many reverts in a row (PROGRAM.md §8B's move-on threshold) doubles exploration.
constexpr int64_t kPlateauReverts = 8;

ScheduleConfig config_from_json(const std::string& text) {
  ConfigParse p = parse_schedule_config(text);
  if (!p.config) throw std::runtime_error("a stored config does not parse: " + p.error);
  return *p.config;
}

std::string changes_text(const std::vector<KnobChange>& changes) {
  std::string s;
  for (const auto& c : changes) s += (s.empty() ? "" : ", ") + c.knob + " " + c.value;
  return s.empty() ? "the default" : s;
}

std::string latency_text(const eval::Verdict& v) {
  return v.has_latency() ? fmt::format("{:.2f} us", *v.latency_us) : "-";
}

// The simulator's prediction for `config`, for screening GPU proposals; nullopt when it does
// not lower (the worker then logs it as REJECTED).
std::optional<double> predicted_us(const SearchContext& ctx, const ScheduleConfig& config,
                                   std::optional<DType> wdt) {
  try {
    const Program p = lower(ctx.model, config, ctx.target, ctx.max_context, wdt);
    return sim::simulate_step(p, ctx.target, sim::constants_for(ctx.target)).step_us;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

class Proposer {
 public:
  Proposer(const CampaignOptions& o, const SearchContext& ctx, const ModelShape& shape,
           const SchedulePrior& prior)
      : o_(o), ctx_(ctx), shape_(shape), prior_(prior) {}

  // nullopt: nothing left to propose (the sweep tried every neighbour of the incumbent).
  std::optional<Proposal> next(CampaignState& s, const ScheduleConfig& incumbent) {
    const int64_t k = s.next_experiment;
    if (k == 1) return Proposal{ctx_.defaults, "*", "the default schedule", "baseline"};
    if (o_.strategy == Strategy::Sweep) {
      for (Proposal& p : one_knob_neighbours(incumbent, ctx_))
        if (!s.tried.contains(schedule_id(p.config))) return std::move(p);
      return std::nullopt;
    }
    while (!s.warm_queue.empty()) {
      ScheduleConfig c = config_from_json(s.warm_queue.front());
      s.warm_queue.erase(s.warm_queue.begin());
      if (s.tried.contains(schedule_id(c))) continue;
      const auto changes = changes_from_default(c, ctx_.defaults);
      return Proposal{std::move(c), "*",
                      "the prior's warm start: " + changes_text(changes), "warm start"};
    }
    // A generator per experiment id, so a resumed campaign draws what it would have drawn.
    std::mt19937_64 rng(splitmix64(s.seed * 0x100000001b3ull + uint64_t(k)));
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    const double eps = s.consecutive_reverts >= kPlateauReverts ? std::min(0.9, 2 * o_.epsilon)
                                                                : o_.epsilon;
    for (int attempt = 0; attempt < 200; ++attempt) {
      const double u = u01(rng);
      Proposal p;
      if (attempt > 0 || u < eps) {
        p = u < eps / 3 || attempt > 100 ? random_point(ctx_, rng) : random_mutation(incumbent, ctx_, rng);
      } else {
        std::vector<Proposal> nbrs;
        for (Proposal& n : one_knob_neighbours(incumbent, ctx_))
          if (!s.tried.contains(schedule_id(n.config))) nbrs.push_back(std::move(n));
        if (nbrs.empty()) continue;
        if (!prior_.empty()) {
          std::vector<std::pair<double, size_t>> order;
          for (size_t i = 0; i < nbrs.size(); ++i)
            order.push_back({prior_.score(nbrs[i].config, ctx_.defaults, shape_, o_.gpu), i});
          std::stable_sort(order.begin(), order.end(),
                           [](const auto& a, const auto& b) { return a.first > b.first; });
          p = std::move(nbrs[order.front().second]);
          p.source = "prior";
        } else {
          // The systematic sweep: the least-swept knob's neighbours first, §5B tier order
          // among equals. Restarting at the first tier after every keep (a noise-level "simpler"
          // keep included) spent 18 of a 44-experiment GPU campaign on pipelining_depth and
          // never reached smem_bytes_per_block, which a direct A/B then measured at -2.3 %
          // (bench/RESULTS.md, thirtieth session).
          const auto swept = [&](const Proposal& n) {
            const auto it = s.knob_proposals.find(n.knob);
            return it == s.knob_proposals.end() ? int64_t{0} : it->second;
          };
          const auto least = std::min_element(
              nbrs.begin(), nbrs.end(),
              [&](const Proposal& a, const Proposal& b) { return swept(a) < swept(b); });
          p = std::move(*least);
        }
      }
      if (!s.tried.contains(schedule_id(p.config))) return p;
    }
    return std::nullopt;
  }

 private:
  const CampaignOptions& o_;
  const SearchContext& ctx_;
  const ModelShape& shape_;
  const SchedulePrior& prior_;
};

}  // namespace

CampaignSummary run_campaign(const CampaignOptions& o, std::ostream& log) {
  if (!o.iters && !o.minutes) throw std::invalid_argument("a campaign needs --iters or --minutes");
  const GpuTarget* target = find_target(o.gpu);
  if (target == nullptr) throw std::invalid_argument(fmt::format("unknown target '{}'", o.gpu));
  std::error_code ec;
  fs::create_directories(o.workdir, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot create '{}': {}", o.workdir.string(), ec.message()));
  CampaignSummary out;
  out.results = o.workdir / kResultsFile;
  out.corpus = o.workdir / kCorpusFile;
  out.state_file = o.workdir / kStateFile;

  std::optional<Checkpoint> ck;
  try {
    ck.emplace(Checkpoint::open(o.model_path));
  } catch (const std::exception& e) {
    throw eval::EvalSetupError(fmt::format("cannot open '{}': {}", o.model_path, e.what()));
  }
  SearchContext ctx{ck->config(), *target, o.eval.max_context,
                    default_schedule_config(ck->config(), *target, o.eval.max_context)};
  const ModelShape shape = ModelShape::of(ck->config());
  const std::string device(eval::name_of(o.eval.device));
  const std::string strategy = o.strategy == Strategy::Sweep ? "loop" : "autoresearch";

  CampaignState s;
  const bool resumed = [&] {
    if (auto loaded = load_campaign_state(out.state_file)) {
      s = std::move(*loaded);
      return true;
    }
    return false;
  }();
  if (resumed) {
    if (s.model != o.model_name || s.gpu != target->name || s.device != device ||
        s.strategy != strategy)
      throw std::runtime_error(fmt::format(
          "'{}' holds a {} campaign of {} on {} (--device {}); this is {} of {} on {} (--device "
          "{}): use another --workdir",
          o.workdir.string(), s.strategy, s.model, s.gpu, s.device, strategy, o.model_name,
          target->name, device));
  } else {
    s.tag = o.tag.empty() ? fmt::format("{}-{}-{}", o.model_name, target->name, device) : o.tag;
    s.model = o.model_name;
    s.model_path = o.model_path;
    s.gpu = target->name;
    s.device = device;
    s.strategy = strategy;
    s.seed = o.seed;
    s.cold = o.cold;
    s.incumbent_config_json = config_to_json(ctx.defaults);
  }
  s.iters_budget = o.iters;
  s.minutes_budget = o.minutes;
  // The lowest PASS latency measured so far: the simplicity tie-break stays within 1 % of it.
  std::optional<double> best_us;
  // A row written just before a kill (the state not yet saved) still owns its id.
  if (fs::exists(out.results)) {
    int64_t last = 0;
    for (const auto& r : eval::read_results(out.results)) {
      last = std::max(last, r.experiment);
      s.tried.insert(r.schedule_id);  // never evaluated twice, checkpointed or not
      if (r.correctness == "PASS" && r.latency_us && (!best_us || *r.latency_us < *best_us))
        best_us = r.latency_us;
    }
    if (last >= s.next_experiment) {
      log << fmt::format("note: results.tsv has experiment {}; continuing at {}\n", last, last + 1);
      s.next_experiment = last + 1;
    }
  }

  std::vector<CorpusEntry> corpus;
  if (!s.cold) {
    for (const fs::path& p : o.prior_corpora)
      for (CorpusEntry& e : load_corpus(p)) corpus.push_back(std::move(e));
    for (CorpusEntry& e : load_corpus(out.corpus)) corpus.push_back(std::move(e));
  }
  const SchedulePrior prior(std::move(corpus));
  if (!resumed && !s.cold && o.strategy == Strategy::Autoresearch)
    for (const ScheduleConfig& c : prior.warm_start(shape, target->name, ctx.defaults))
      s.warm_queue.push_back(config_to_json(c));
  log << fmt::format("campaign {} in {}: {} {} experiments so far, prior of {} configs{}\n", s.tag,
                     o.workdir.string(), resumed ? "resuming," : "new,", s.next_experiment - 1,
                     prior.size(), s.cold ? " (--cold: not used)" : "");

  WorkerSetup setup{o.model_path, o.model_name, target->name, o.eval, o.weights};
  EvalWorker worker(o.worker_exe, setup, o.workdir / kWorkerLog, o.watchdog_s);
  const int64_t starts_before = s.worker_starts;
  Proposer proposer(o, ctx, shape, prior);
  std::optional<double> incumbent_predicted;  // cuda screening
  std::optional<DType> wdt;
  if (o.weights == "bf16" || (o.weights.empty() && o.eval.device == eval::EvalDevice::Cuda))
    wdt = DType::BF16;
  else if (o.weights == "fp32")
    wdt = DType::F32;
  int64_t screened_in_row = 0;
  const auto run_start = Clock::now();
  double saved_elapsed = s.elapsed_s;
  const auto elapsed = [&] {
    return saved_elapsed + std::chrono::duration<double>(Clock::now() - run_start).count();
  };

  for (;;) {
    const int64_t k = s.next_experiment;
    if (o.iters && k > *o.iters) break;
    if (o.minutes && elapsed() >= *o.minutes * 60) break;
    if (s.done) break;
    const ScheduleConfig incumbent = config_from_json(s.incumbent_config_json);
    std::optional<Proposal> p = proposer.next(s, incumbent);
    if (!p) {
      s.done = true;
      s.done_reason = o.strategy == Strategy::Sweep
                          ? "every one-knob change of the incumbent was tried (a local optimum)"
                          : "no untried proposal found";
      log << "done: " << s.done_reason << "\n";
      break;
    }
    const std::string id = schedule_id(p->config);
    // On the GPU, the simulator screens: a proposal it predicts clearly slower is not measured.
    if (o.eval.device == eval::EvalDevice::Cuda && k > 1 && s.incumbent && screened_in_row < 50) {
      if (!incumbent_predicted) incumbent_predicted = predicted_us(ctx, incumbent, wdt);
      const auto candidate = predicted_us(ctx, p->config, wdt);
      if (incumbent_predicted && candidate &&
          *candidate > *incumbent_predicted * (1 + o.screen_margin)) {
        ++s.screened;
        ++screened_in_row;
        s.tried.insert(id);
        if (p->knob != "*") ++s.knob_proposals[p->knob];
        std::ofstream(o.workdir / kScreenedFile, std::ios::app)
            << nlohmann::json({{"schedule_id", id},
                               {"change", p->change},
                               {"predicted_us", *candidate},
                               {"incumbent_predicted_us", *incumbent_predicted}})
                   .dump()
            << "\n";
        continue;
      }
    }
    screened_in_row = 0;
    if (p->knob != "*") ++s.knob_proposals[p->knob];

    const eval::Verdict v = worker.evaluate(p->config, k);
    const eval::Verdict* inc = k == 1 ? nullptr : s.incumbent ? &*s.incumbent : nullptr;
    KeepRevert d = k == 1 ? decide(nullptr, v)
                          : s.incumbent ? decide(inc, v, best_us)
                                        : decide(nullptr, v);
    if (v.pass() && v.has_latency() && (!best_us || *v.latency_us < *best_us))
      best_us = v.latency_us;
    if (k > 1 && !s.incumbent && d.keep) d.reason = "first PASS (the baseline has no latency)";

    eval::ResultsRow row;
    row.experiment = k;
    row.tag = s.tag;
    row.model = s.model;
    row.gpu = s.gpu;
    row.kept = d.keep ? "keep" : "revert";
    row.correctness = std::string(eval::name_of(v.correctness));
    row.schedule_id = id;  // the proposal's id (the worker computes the same from its copy)
    if (v.has_latency()) {
      row.latency_us = v.latency_us;
      row.pct_of_roofline = v.pct_of_roofline;
    }
    std::string mark;
    if (v.has_latency())
      mark = v.latency_kind == eval::LatencyKind::Predicted ? "[predicted] " : "[measured-gpu] ";
    std::string against;
    if (v.has_latency() && inc && inc->has_latency())
      against = fmt::format(" vs incumbent {:.2f} us", *inc->latency_us);
    row.description = fmt::format("{}{}: {}; {}: {}{}; {}", mark, p->source, p->change,
                                  row.kept, d.reason, against, v.details);
    std::string why;
    if (!eval::append_results_row(out.results, row, &why)) throw std::runtime_error(why);
    {
      // Ordered: the config's tiling keeps its order, and with it its schedule id.
      nlohmann::ordered_json e = {
          {"experiment", k}, {"schedule_id", id}, {"correctness", row.correctness}};
      if (v.has_latency()) {
        e["latency_us"] = *v.latency_us;
        e["latency_kind"] = std::string(eval::name_of(v.latency_kind));
      }
      e["config"] = nlohmann::ordered_json::parse(config_to_json(p->config));
      std::ofstream f(o.workdir / kExperimentsFile, std::ios::app);
      if (!(f << e.dump() << "\n"))
        log << "warning: cannot append to " << (o.workdir / kExperimentsFile).string() << "\n";
    }

    ++s.counts[row.correctness];
    s.tried.insert(id);
    if (k == 1) {
      s.baseline = v;
      s.baseline_config_json = config_to_json(p->config);
    }
    if (d.keep) {
      s.incumbent = v;
      s.incumbent_config_json = config_to_json(p->config);
      s.incumbent_experiment = k;
      ++s.kept;
      s.consecutive_reverts = 0;
      incumbent_predicted.reset();
      if (v.has_latency()) {
        CorpusEntry e;
        e.model = s.model;
        e.gpu = s.gpu;
        e.tag = s.tag;
        e.shape = shape;
        e.schedule_id = row.schedule_id;
        e.latency_kind = std::string(eval::name_of(v.latency_kind));
        e.config_json = config_to_json(p->config);
        e.changes = changes_from_default(p->config, ctx.defaults);
        e.latency_us = *v.latency_us;
        e.pct_of_roofline = v.pct_of_roofline.value_or(0);
        e.speedup = s.baseline && s.baseline->has_latency() ? *s.baseline->latency_us / *v.latency_us : 1.0;
        e.experiment = k;
        if (!append_corpus(out.corpus, e))
          log << "warning: cannot append to " << out.corpus.string() << "\n";
      }
    } else if (k > 1) {
      ++s.consecutive_reverts;
    }
    s.next_experiment = k + 1;
    s.worker_starts = starts_before + worker.starts();
    s.elapsed_s = elapsed();
    save_campaign_state(out.state_file, s);
    ++out.experiments_run;
    out.last_experiment = k;
    log << fmt::format("exp {:>4}  {:<8} {:>12}  {:<6}  {}: {} ({})\n", k, row.correctness,
                       latency_text(v) + (v.has_latency() && v.latency_kind == eval::LatencyKind::Predicted ? "*" : ""),
                       row.kept, p->source, p->change, d.reason)
        << std::flush;
  }
  s.worker_starts = starts_before + worker.starts();
  s.elapsed_s = elapsed();
  save_campaign_state(out.state_file, s);
  out.state = s;
  return out;
}

}  // namespace amk::search
