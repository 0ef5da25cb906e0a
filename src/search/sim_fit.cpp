// Fitting the timing simulator's constants to measurements, and scoring a fit on held-out cases
// (include/amk/sim_fit.h). Nelder-Mead on log-constants: a dozen smooth-ish parameters and an
// objective that costs one simulation per case, so a derivative-free simplex is enough.
#include "amk/sim_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "amk/hash.h"

namespace amk::sim {

namespace {

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream s(line);
  while (std::getline(s, cell, sep)) out.push_back(cell);
  if (!line.empty() && line.back() == sep) out.emplace_back();
  return out;
}

uint64_t parse_ns(const std::string& cell, const std::string& where) {
  if (cell == "-") return 0;
  size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(cell, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != cell.size() || cell.empty() || cell[0] == '-')
    throw std::invalid_argument(fmt::format("{}: '{}' is not a time in ns", where, cell));
  return uint64_t(v);
}

double median_of(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void parallel_for(size_t n, int threads, const std::function<void(size_t)>& body) {
  size_t workers = threads > 0 ? size_t(threads) : std::max(1u, std::thread::hardware_concurrency());
  workers = std::min(workers, n);
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i) body(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(workers);
  for (size_t w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      try {
        for (size_t i = next++; i < n; i = next++) body(i);
      } catch (...) {
        errors[w] = std::current_exception();
      }
    });
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// A case prepared for repeated simulation, with what its simulations are compared to.
struct PreparedCase {
  Prepared timing;  // at the timed steps' position; null without a measured µs/token
  std::vector<Prepared> profiles;
  std::vector<StepSummary> measured;
};

struct Job {
  size_t case_index;
  int profile;  // -1: the timing simulation
};

class Objective {
 public:
  Objective(const std::vector<SimCase>& cases, double profile_weight, double relative_weight,
            int threads)
      : cases_(cases), weight_(profile_weight), relative_weight_(relative_weight),
        threads_(threads) {
    prepared_.resize(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      const SimCase& c = cases[i];
      PreparedCase& p = prepared_[i];
      if (c.measured_us > 0) {
        p.timing = prepare(c.program, c.target, SimOptions{c.position, 2});
        jobs_.push_back({i, -1});
      }
      for (size_t k = 0; k < c.profiles.size(); ++k) {
        const MeasuredProfile& m = c.profiles[k];
        p.profiles.push_back(prepare(c.program, c.target, SimOptions{m.position, 2}));
        p.measured.push_back(summarize_step(c.program, m.stamps));
        jobs_.push_back({i, int(k)});
      }
    }
    if (jobs_.empty())
      throw std::invalid_argument("fit: no case has a measured µs/token or a profile to fit to");
    // The knob-effect term's groups, fixed with the cases: each timing job's group, or -1 for a
    // profile job or a group with fewer than two timed cases (no spread to weigh).
    std::map<std::string, int> index;
    std::vector<int> group(jobs_.size(), -1);
    for (size_t j = 0; j < jobs_.size(); ++j) {
      if (jobs_[j].profile >= 0) continue;
      const auto [it, fresh] =
          index.try_emplace(cases_[jobs_[j].case_index].group, int(index.size()));
      if (fresh) group_size_.push_back(0);
      group[j] = it->second;
      ++group_size_[size_t(group[j])];
    }
    for (int& g : group)
      if (g >= 0 && group_size_[size_t(g)] < 2) g = -1;
    group_of_job_ = std::move(group);
  }

  // Mean squared log error of the µs/token, plus the weighted profile terms; +inf when a
  // simulation fails.
  double operator()(const SimConstants& c, std::vector<double>* predicted = nullptr) const {
    std::vector<double> error(jobs_.size(), 0.0), step(jobs_.size(), 0.0),
        log_error(jobs_.size(), 0.0);
    std::atomic<bool> failed{false};
    parallel_for(jobs_.size(), threads_, [&](size_t j) {
      const Job& job = jobs_[j];
      const PreparedCase& p = prepared_[job.case_index];
      try {
        if (job.profile < 0) {
          const SimResult r = simulate(*p.timing, c);
          step[j] = r.step_us;
          const double e = std::log(r.step_us / cases_[job.case_index].measured_us);
          log_error[j] = e;
          error[j] = e * e;
        } else {
          const SimResult r = simulate(*p.profiles[size_t(job.profile)], c);
          error[j] = profile_error(cases_[job.case_index].program, r,
                                   p.measured[size_t(job.profile)]);
        }
        if (!std::isfinite(error[j])) failed = true;
      } catch (const std::exception&) {
        failed = true;
      }
    });
    if (predicted) {
      predicted->assign(cases_.size(), 0.0);
      for (size_t j = 0; j < jobs_.size(); ++j)
        if (jobs_[j].profile < 0) (*predicted)[jobs_[j].case_index] = step[j];
    }
    if (failed) return INFINITY;
    double timing = 0, profile = 0;
    size_t n_timing = 0, n_profile = 0;
    for (size_t j = 0; j < jobs_.size(); ++j) {
      if (jobs_[j].profile < 0) {
        timing += error[j];
        ++n_timing;
      } else {
        profile += error[j];
        ++n_profile;
      }
    }
    double total = 0;
    if (n_timing) total += timing / double(n_timing);
    if (n_timing && relative_weight_ > 0) total += relative_weight_ * relative(log_error);
    if (n_profile) total += (n_timing ? weight_ : 1.0) * profile / double(n_profile);
    return total;
  }

 private:
  static double profile_error(const Program& program, const SimResult& r,
                              const StepSummary& measured) {
    const StepSummary predicted = summarize_step(program, r.stamps);
    std::unordered_map<std::string, const StageSummary*> by_stage;
    for (const StageSummary& s : predicted.stages) by_stage[s.stage] = &s;
    double sum = 0;
    size_t n = 0;
    auto add = [&](double pred, double meas) {
      if (!(meas > 0.05)) return;  // below the stamps' resolution: nothing to compare
      const double e = std::log(std::max(pred, 1e-3) / meas);
      sum += e * e;
      ++n;
    };
    for (const StageSummary& m : measured.stages) {
      const auto it = by_stage.find(m.stage);
      if (it == by_stage.end()) continue;
      add(it->second->op_us, m.op_us);
      if (m.body_us >= 0 && it->second->body_us >= 0) add(it->second->body_us, m.body_us);
    }
    // The span counts as much as all the stages together: it is what the step costs.
    const double e = std::log(std::max(predicted.span_us, 1e-3) / measured.span_us);
    return n ? 0.5 * sum / double(n) + 0.5 * e * e : e * e;
  }

  // Mean over the timed cases of groups with at least two of them of (e_i - the group's mean e)^2:
  // the knob effects' error, blind to each model's level.
  double relative(const std::vector<double>& log_error) const {
    std::vector<double> group_sum(group_size_.size(), 0.0);
    for (size_t j = 0; j < jobs_.size(); ++j)
      if (group_of_job_[j] >= 0) group_sum[size_t(group_of_job_[j])] += log_error[j];
    double sum = 0;
    size_t n = 0;
    for (size_t j = 0; j < jobs_.size(); ++j) {
      const int g = group_of_job_[j];
      if (g < 0) continue;
      const double d = log_error[j] - group_sum[size_t(g)] / group_size_[size_t(g)];
      sum += d * d;
      ++n;
    }
    return n ? sum / double(n) : 0.0;
  }

  const std::vector<SimCase>& cases_;
  double weight_;
  double relative_weight_;
  int threads_;
  std::vector<PreparedCase> prepared_;
  std::vector<Job> jobs_;
  std::vector<int> group_of_job_;  // the knob-effect term's group per job, -1: none
  std::vector<int> group_size_;    // timed cases per group
};

}  // namespace

MeasuredProfile read_profile_tsv(const std::string& text, const Program& program,
                                 const std::string& source) {
  MeasuredProfile m;
  const size_t n = program.tasks.size();
  m.stamps.assign(n, {});
  std::unordered_map<int64_t, size_t> index_of;
  for (size_t i = 0; i < n; ++i) index_of[program.tasks[i].id] = i;
  std::istringstream in(text);
  std::string line;
  size_t line_no = 0, rows = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::string where = fmt::format("{}:{}", source, line_no);
    const std::vector<std::string> cells = split(line, '\t');
    if (line_no == 1) {
      if (cells.size() < 8 || cells[0] != "task" || cells[1] != "label")
        throw std::invalid_argument(fmt::format(
            "{}: not an amk bench --profile-tsv file (its header starts task, label, op, sm, "
            "est_bytes, wait_begin_ns, op_begin_ns, op_end_ns)",
            where));
      continue;
    }
    if (cells.size() != 8 && cells.size() != 10)
      throw std::invalid_argument(
          fmt::format("{}: {} columns, expected 8 or 10", where, cells.size()));
    int64_t id = 0;
    try {
      id = std::stoll(cells[0]);
    } catch (const std::exception&) {
      throw std::invalid_argument(fmt::format("{}: task '{}' is not an id", where, cells[0]));
    }
    const auto it = index_of.find(id);
    if (it == index_of.end() || program.tasks[it->second].label != cells[1])
      throw std::invalid_argument(fmt::format(
          "{}: task {} '{}' is not in the program{} (the profile belongs to another program: "
          "lower the same model, config and context as the bench did)",
          where, id, cells[1],
          it == index_of.end() ? ""
                               : fmt::format(", whose task {} is '{}'", id,
                                             program.tasks[it->second].label)));
    const size_t i = it->second;
    m.stamps[i] = {parse_ns(cells[5], where), parse_ns(cells[6], where),
                   parse_ns(cells[7], where)};
    if (m.stamps[i].op_end == 0) m.stamps[i].op_end = 1;  // 0 would read as "did not run"
    if (cells.size() == 10) {
      m.stamps[i].body_begin = parse_ns(cells[8], where);
      m.stamps[i].body_end = parse_ns(cells[9], where);
    }
    ++rows;
  }
  if (rows == 0) throw std::invalid_argument(fmt::format("{}: no task rows", source));
  return m;
}

StepSummary summarize_step(const Program& program, const std::vector<eval::TaskStamps>& stamps) {
  if (stamps.size() != program.tasks.size())
    throw std::invalid_argument("summarize_step: one stamp per task is needed");
  struct Acc {
    std::vector<double> op, body;
    size_t order = 0;
  };
  std::map<std::string, Acc> by_stage;
  uint64_t first = UINT64_MAX, last = 0;
  for (size_t i = 0; i < stamps.size(); ++i) {
    const eval::TaskStamps& s = stamps[i];
    if (s.op_end == 0) continue;
    const std::string stage = eval::parse_label(program.tasks[i].label).stage;
    auto [it, fresh] = by_stage.try_emplace(stage);
    if (fresh) it->second.order = i;
    it->second.op.push_back(double(s.op_end - std::min(s.op_begin, s.op_end)) / 1e3);
    if (s.marks_body()) it->second.body.push_back(double(s.body_end - s.body_begin) / 1e3);
    first = std::min(first, s.wait_begin);
    last = std::max(last, s.op_end);
  }
  StepSummary out;
  std::vector<std::pair<size_t, StageSummary>> rows;
  for (auto& [stage, acc] : by_stage)
    rows.push_back({acc.order,
                    {stage, int64_t(acc.op.size()), median_of(acc.op),
                     acc.body.empty() ? -1.0 : median_of(acc.body)}});
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& r : rows) out.stages.push_back(r.second);
  out.span_us = last > first ? double(last - first) / 1e3 : 0;
  return out;
}

std::vector<double> predict_cases(const std::vector<SimCase>& cases, const SimConstants& c,
                                  int threads) {
  std::vector<double> out(cases.size(), 0.0);
  parallel_for(cases.size(), threads, [&](size_t i) {
    out[i] = simulate_step(cases[i].program, cases[i].target, c,
                           SimOptions{cases[i].position, 2})
                 .step_us;
  });
  return out;
}

namespace {

// The constants at log-coordinates `x` of `free`, the rest as in `base`.
SimConstants constants_at(const SimConstants& base, const std::vector<std::string>& free,
                          const std::vector<double>& x) {
  SimConstants c = base;
  for (size_t i = 0; i < free.size(); ++i) *constant_field(c, free[i]) = std::exp(x[i]);
  return c;
}

struct Minimum {
  SimConstants constants;
  double value = 0;
};

// Nelder-Mead on the logarithms of `free` from `start` (whose objective is `start_value`), until
// `evaluations` (counted here, started by the caller) reaches options.max_evaluations.
Minimum minimise(const Objective& objective, const SimConstants& start, double start_value,
                 const std::vector<std::string>& free, const FitOptions& options,
                 int& evaluations) {
  const size_t d = free.size();
  // Coordinates: log of each free constant (a zero start becomes a small positive one).
  std::vector<double> x0(d);
  for (size_t i = 0; i < d; ++i) x0[i] = std::log(std::max(*constant_field(start, free[i]), 1e-3));
  auto f = [&](const std::vector<double>& x) {
    ++evaluations;
    return objective(constants_at(start, free, x));
  };

  std::vector<double> best = x0;
  double best_value = start_value;
  // Nelder-Mead, restarted from its best point while it keeps improving (a restart rebuilds a
  // simplex that collapsed along some direction).
  for (int restart = 0; restart < 4 && d > 0 && evaluations < options.max_evaluations; ++restart) {
    std::vector<std::vector<double>> simplex{best};
    std::vector<double> values{best_value};
    for (size_t i = 0; i < d; ++i) {
      std::vector<double> x = best;
      x[i] += restart == 0 ? 0.4 : 0.15;
      simplex.push_back(x);
      values.push_back(f(x));
    }
    const double before = best_value;
    while (evaluations < options.max_evaluations) {
      std::vector<size_t> order(d + 1);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
      std::vector<std::vector<double>> s2;
      std::vector<double> v2;
      for (size_t i : order) {
        s2.push_back(simplex[i]);
        v2.push_back(values[i]);
      }
      simplex.swap(s2);
      values.swap(v2);
      if (values[d] - values[0] < options.tolerance * (1 + std::abs(values[0]))) break;
      std::vector<double> centroid(d, 0.0);
      for (size_t i = 0; i < d; ++i)
        for (size_t k = 0; k < d; ++k) centroid[k] += simplex[i][k] / double(d);
      auto along = [&](double t) {
        std::vector<double> x(d);
        for (size_t k = 0; k < d; ++k) x[k] = centroid[k] + t * (simplex[d][k] - centroid[k]);
        return x;
      };
      const std::vector<double> xr = along(-1.0);
      const double fr = f(xr);
      if (fr < values[0]) {
        const std::vector<double> xe = along(-2.0);
        const double fe = f(xe);
        if (fe < fr) {
          simplex[d] = xe;
          values[d] = fe;
        } else {
          simplex[d] = xr;
          values[d] = fr;
        }
      } else if (fr < values[d - 1]) {
        simplex[d] = xr;
        values[d] = fr;
      } else {
        const bool outside = fr < values[d];
        const std::vector<double> xc = along(outside ? -0.5 : 0.5);
        const double fc = f(xc);
        if (fc < std::min(fr, values[d])) {
          simplex[d] = xc;
          values[d] = fc;
        } else {  // shrink toward the best
          for (size_t i = 1; i <= d; ++i) {
            for (size_t k = 0; k < d; ++k) simplex[i][k] = simplex[0][k] + 0.5 * (simplex[i][k] - simplex[0][k]);
            values[i] = f(simplex[i]);
          }
        }
      }
    }
    for (size_t i = 0; i <= d; ++i)
      if (values[i] < best_value) {
        best_value = values[i];
        best = simplex[i];
      }
    if (before - best_value < options.tolerance * (1 + best_value)) break;
  }
  return {constants_at(start, free, best), best_value};
}

// Value n of the seed's stream, uniform in [0, 1): amk/hash.h's counter-based splitmix64, the
// same bits on every platform (std::uniform_real_distribution's are implementation-defined).
double uniform_draw(uint64_t seed, uint64_t n) {
  return double(splitmix64(seed + n * kSplitmixGamma) >> 11) * 0x1.0p-53;
}

}  // namespace

FitResult fit_constants(const std::vector<SimCase>& cases, const SimConstants& start,
                        const FitOptions& options) {
  if (options.starts < 1)
    throw std::invalid_argument(fmt::format("fit: {} starts (at least 1)", options.starts));
  std::vector<std::string> free = options.free.empty() ? fitted_constant_names() : options.free;
  for (const std::string& name : free)
    if (std::find(fitted_constant_names().begin(), fitted_constant_names().end(), name) ==
        fitted_constant_names().end())
      throw std::invalid_argument(fmt::format("fit: '{}' is not a fitted constant", name));
  const Objective objective(cases, options.profile_weight, options.relative_weight,
                            options.threads);
  FitResult result;
  result.start_objective = objective(start);
  int evaluations = 1;
  // A constant no case exercises (e.g. strip_slow_factor when no case has a tile on the
  // shared-memory strip path) leaves the objective exactly where it was: it keeps its start
  // value instead of drifting along a flat direction of the simplex.
  if (options.free.empty()) {
    std::vector<std::string> moving;
    for (const std::string& name : free) {
      SimConstants c = start;
      double* v = constant_field(c, name);
      *v = std::max(*v, 1e-3) * 1.5;
      ++evaluations;
      if (objective(c) != result.start_objective) moving.push_back(name);
    }
    free.swap(moving);
  }

  Minimum best = minimise(objective, start, result.start_objective, free, options, evaluations);
  result.starts.push_back({result.start_objective, best.value, evaluations});
  result.evaluations = evaluations;
  // Further starts: the given one with each free constant moved by a factor in [e^-0.5, e^0.5)
  // (in log space, as the simplex moves it), kept positive and at least the 1e-3 the simplex
  // puts a zero start at.
  uint64_t draw = 0;
  const double lowest = std::log(1e-3);
  for (int k = 1; k < options.starts; ++k) {
    std::vector<double> x(free.size());
    for (size_t i = 0; i < free.size(); ++i)
      x[i] = std::max(std::log(std::max(*constant_field(start, free[i]), 1e-3)) +
                          (uniform_draw(options.seed, draw++) - 0.5),
                      lowest);
    const SimConstants from = constants_at(start, free, x);
    const double from_value = objective(from);
    int own = 1;
    const Minimum m = minimise(objective, from, from_value, free, options, own);
    result.starts.push_back({from_value, m.value, own});
    result.evaluations += own;
    if (m.value < best.value) {
      best = m;
      result.best_start = k;
    }
  }
  result.constants = best.constants;
  result.objective = objective(result.constants, &result.predicted_us);
  return result;
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("spearman: series of different lengths");
  const size_t n = a.size();
  if (n < 2) return NAN;
  auto ranks = [n](const std::vector<double>& v) {
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return v[x] < v[y]; });
    std::vector<double> r(n);
    for (size_t i = 0; i < n;) {
      size_t j = i;
      while (j + 1 < n && v[order[j + 1]] == v[order[i]]) ++j;
      const double average = 0.5 * double(i + j) + 1.0;  // ranks i+1 .. j+1
      for (size_t k = i; k <= j; ++k) r[order[k]] = average;
      i = j + 1;
    }
    return r;
  };
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double ma = std::accumulate(ra.begin(), ra.end(), 0.0) / double(n);
  const double mb = std::accumulate(rb.begin(), rb.end(), 0.0) / double(n);
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < n; ++i) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  if (saa == 0 || sbb == 0) return NAN;
  return sab / std::sqrt(saa * sbb);
}

double median_abs_relative_error(const std::vector<double>& predicted,
                                 const std::vector<double>& measured) {
  if (predicted.size() != measured.size())
    throw std::invalid_argument("median_abs_relative_error: series of different lengths");
  std::vector<double> e;
  for (size_t i = 0; i < predicted.size(); ++i)
    e.push_back(std::abs(predicted[i] / measured[i] - 1.0));
  return median_of(e);
}

}  // namespace amk::sim
