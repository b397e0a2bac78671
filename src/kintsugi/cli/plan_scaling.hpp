#pragma once
// `kintsugi plan --scaling strong|weak`: the fastest layout at each node count
// (plan/scaling.hpp), as a table or JSON, and with --plot an SVG of the efficiency.
#include "kintsugi/cli/plan_args.hpp"

namespace kintsugi::cli {

void run_scaling(const PlanArgs& a, const PlanInputs& in);

}  // namespace kintsugi::cli
