#pragma once
// Pre-emption: a cluster scheduler sends SIGTERM before it takes the nodes back, a person at
// the terminal presses Ctrl-C (SIGINT). The handler only sets a flag; training reads it at every
// micro-batch and step boundary (where all ranks agree: one of them signalled is enough), saves
// the last completed step and stops cleanly (docs/checkpoints.md).
//
// Further SIGTERMs change nothing: a launcher or scheduler may repeat the signal while the
// checkpoint is being written, and the save must finish. A second SIGINT is a person asking to
// stop at once: the process says so and exits without finishing the save (a checkpoint being
// written is never `latest` until it is complete, so the previous one stays good).
namespace kintsugi {

// Installs the handlers for SIGTERM and SIGINT (idempotent).
void install_stop_handlers();
// Whether a stop signal arrived in this process.
bool stop_requested();

}  // namespace kintsugi
