// The sm_assignment knob: every task gets an SM, and each SM's queue is its tasks in task-list
// order. The lowering emits tasks in a topological order, so every queue is a linear extension
// of the DAG whatever SM each task gets (the queue-order invariant of IR_SPEC §3.1).
#pragma once

#include "amk/ir.h"

namespace amk::schedule {

// "round_robin": task i -> SM i mod num_sms.
// "load_balance": in list order, each task goes to the SM with the least est_bytes so far (a task
//   counts at least 1 byte, so cheap tasks spread too); ties go to the lowest SM.
// "critical_path": a list scheduler: in list order, each task goes to the SM where it would finish
//   earliest under a bandwidth model (start = max(its waits met, its SM's previous task done);
//   duration = a fixed per-task overhead + est_bytes at the SM's share of the target's measured,
//   else spec, bandwidth); ties go to the SM free soonest, then the lowest SM.
// explicit {task_id: sm}: listed tasks go where they are told; the rest are load-balanced around
//   them. Throws LoweringError for an unknown policy, task id or SM.
void assign_sms(Program& program, const ScheduleConfig& config, const GpuTarget& target);

}  // namespace amk::schedule
