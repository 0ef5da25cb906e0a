// The page_allocation knob: binding every ACTIVATION buffer to a physical scratch Page.
//
// "graph_color" colours the interval graph of activation live ranges over the task-list order
// (which is topological): a buffer takes over a page only once its previous occupant is provably
// dead, i.e. every reader of the old buffer happens-before every writer of the new one. List
// order alone does not prove that (two tasks adjacent in the list may be unordered in the DAG),
// so reuse happens across a *cut*: a task that every earlier task reaches and that reaches every
// later task (in a decode step, the residual adds). validate()'s page-aliasing check therefore
// never fires on these programs. "linear" gives each activation its own page; "none" leaves the
// program without pages.
#pragma once

#include <optional>
#include <string_view>

#include "amk/ir.h"

namespace amk::schedule {

// The program's tasks must be in a topological order with ids equal to their index.
std::optional<PageAllocation> allocate_pages(const Program& program, std::string_view policy);

}  // namespace amk::schedule
