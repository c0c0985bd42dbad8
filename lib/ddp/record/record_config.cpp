#include "ddp/record/record_config.h"

#include "ddp/config/config_schema.h"

namespace ddp {

void declare_config(ConfigSchema& schema, LoggingConfig& config) {
  schema.section("logging", "What rank 0 records besides metrics.jsonl: TensorBoard events and an HTML report.");
  schema.add("logging.tensorboard", &config.tensorboard,
             "write TensorBoard event files (scalars, the resolved config as text) under <output_dir>/tb/");
  schema.add("logging.report", &config.report,
             "write <output_dir>/report.html (curves, throughput, per-rank step times, system monitor) at "
             "evaluations (at most every 10 s, or 20 times its render time if longer) and at the end");
}

}  // namespace ddp
