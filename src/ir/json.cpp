// STUB: replaced by the JSON implementation.
#include "amk/json.h"
namespace amk {
LoadResult program_from_json(std::string_view) { LoadResult r; r.error = "not implemented"; return r; }
LoadResult load_program(const std::filesystem::path&) { LoadResult r; r.error = "not implemented"; return r; }
std::string program_to_json(const Program&) { return "{}"; }
bool save_program(const Program&, const std::filesystem::path&, std::string* e) { if (e) *e = "not implemented"; return false; }
std::string target_to_json(const GpuTarget&) { return "{}"; }
std::string config_to_json(const ScheduleConfig&) { return "{}"; }
std::optional<std::string> Program::meta_string(std::string_view) const { return std::nullopt; }
void Program::set_meta_string(std::string, std::string_view) {}
}  // namespace amk
