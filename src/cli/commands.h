// The `amk` subcommands. Each add_*_command registers its options on the root app; when the
// command line selects it, its callback stores the work in `action`, which main() runs after a
// clean parse (so a parse error never half-runs a command).
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace amk::cli {

// Exit codes, the same for every command.
inline constexpr int kExitOk = 0;        // accepted / succeeded
inline constexpr int kExitFailed = 1;    // rejected by validate() or the run failed
inline constexpr int kExitBadInput = 2;  // unreadable or malformed input, bad usage

using Action = std::function<int()>;

void add_validate_command(CLI::App& app, Action& action);
void add_info_command(CLI::App& app, Action& action);
void add_targets_command(CLI::App& app, Action& action);
void add_exec_command(CLI::App& app, Action& action);
void add_compile_command(CLI::App& app, Action& action);
void add_run_command(CLI::App& app, Action& action);
void add_oracle_command(CLI::App& app, Action& action);
void add_make_model_command(CLI::App& app, Action& action);
void add_bench_command(CLI::App& app, Action& action);
void add_tokenize_command(CLI::App& app, Action& action);
void add_template_command(CLI::App& app, Action& action);
void add_generate_command(CLI::App& app, Action& action);
void add_chat_command(CLI::App& app, Action& action);
void add_perplexity_command(CLI::App& app, Action& action);
void add_serve_command(CLI::App& app, Action& action);
// amk sim, sim-fit, sim-score (the timing simulator).
void add_sim_command(CLI::App& app, Action& action);
void add_eval_command(CLI::App& app, Action& action);
void add_eval_worker_command(CLI::App& app, Action& action);
void add_propose_command(CLI::App& app, Action& action);
void add_loop_command(CLI::App& app, Action& action);
void add_autoresearch_command(CLI::App& app, Action& action);
void add_campaign_command(CLI::App& app, Action& action);

}  // namespace amk::cli
