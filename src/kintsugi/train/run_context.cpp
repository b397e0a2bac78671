#include "kintsugi/train/run_context.hpp"

#include <fmt/format.h>

namespace kintsugi {

namespace {

// The config with parallel.dp resolved for the job (a single process may pass dp = 0).
RunConfig resolved(const RunConfig& config, const Topology* topology) {
  RunConfig c = config;
  resolve_layout(c, topology ? topology->world().size() : 1);
  return c;
}

}  // namespace

RunContext::RunContext(const RunConfig& config_in, TrainInputs& data_in,
                       const TrainOptions& options_in, std::ostream& log_in,
                       const Topology* topology_in)
    : config(resolved(config_in, topology_in)),
      tc(config.train),
      data(data_in),
      options(options_in),
      log(log_in),
      topology(topology_in),
      place(topology_in, config.parallel.sequence_parallel),
      memory(MemoryLimit{.bytes = static_cast<std::size_t>(tc.max_memory_gb * 1073741824.0),
                         .setting = fmt::format("train.max_memory_gb = {}", tc.max_memory_gb)}),
      backend(make_backend(tc.device, memory)),
      model(*backend, config, place, tracer),
      micro_batches(static_cast<int>(tc.global_batch / place.dp_size / tc.micro_batch)),
      tokens_per_step(tc.global_batch * config.model.seq_len),
      schedule(lr_schedule_of(tc)),
      lr_rule(batch_lr_rule_of(tc.batch_lr_rule)),
      batches(tc),
      out(options_in.out_dir) {}

}  // namespace kintsugi
