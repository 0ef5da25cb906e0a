// jinja2's built-in filters (x | trim), tests (x is defined) and global functions (range,
// namespace, raise_exception, ...), plus transformers' additions (tojson without HTML escaping,
// raise_exception, strftime_now).
#pragma once

#include <functional>
#include <memory>
#include <string_view>

#include "amk/chat_template.h"
#include "template/value.h"

namespace amk::tmpl {

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

// Throw ValueError (or TemplateError for raise_exception) on bad arguments.
Value apply_filter(std::string_view name, const Value& subject, CallArgs& args, const TemplateLimits& limits);
bool apply_test(std::string_view name, const Value& subject, CallArgs& args, const TemplateLimits& limits);

// The global functions, as a dict of callables for the outermost scope. Every namespace() made
// is passed to `on_namespace`: a namespace can be made to hold itself (set ns.x = ns), a
// reference cycle that the evaluator breaks when the render ends.
DictValue global_functions(const std::function<void(const std::shared_ptr<NamespaceValue>&)>& on_namespace);

}  // namespace amk::tmpl
