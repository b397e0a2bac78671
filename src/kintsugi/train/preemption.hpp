#pragma once
// Pre-emption: a cluster scheduler sends SIGTERM before it takes the nodes back, a person at
// the terminal presses Ctrl-C (SIGINT), a launcher passes on SIGUSR1 or SIGUSR2 (Open MPI's
// mpirun forwards those at once; docs/checkpoints.md). The handler only sets a flag; training reads it at every
// micro-batch and step boundary (where all ranks agree: one of them signalled is enough), saves
// the last completed step and stops cleanly (docs/checkpoints.md).
//
// Further SIGTERMs (and SIGUSR1/2s) change nothing: a launcher or scheduler may repeat the signal while the
// checkpoint is being written, and the save must finish. A second SIGINT is a person asking to
// stop at once: the process says so and exits without finishing the save (a checkpoint being
// written is never `latest` until it is complete, so the previous one stays good).
namespace kintsugi {

// Installs the handlers for SIGTERM, SIGINT, SIGUSR1 and SIGUSR2 (idempotent).
void install_stop_handlers();
// Whether a stop signal arrived in this process.
bool stop_requested();

}  // namespace kintsugi
