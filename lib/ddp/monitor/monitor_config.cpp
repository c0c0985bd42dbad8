#include "ddp/monitor/monitor_config.h"

#include "ddp/common/limits.h"
#include "ddp/config/config_schema.h"

namespace ddp {

void declare_config(ConfigSchema& schema, MonitorConfig& config) {
  schema.section("monitor", "Each rank's CPU, memory, data wait and compute time, recorded by rank 0.");
  schema.add("monitor.every_s", &config.every_s,
             "seconds between monitor records (metrics.jsonl, TensorBoard, warnings for starved input and "
             "stragglers); 0: off")
      .min(0)
      .max(kMaxSeconds);
  schema.add("monitor.log_every_s", &config.log_every_s,
             "seconds between the monitor's lines in the log (the first record's is always said; every record "
             "still goes to metrics.jsonl and TensorBoard), so that loss lines are not drowned; 0: never")
      .min(0)
      .max(kMaxSeconds);
}

}  // namespace ddp
