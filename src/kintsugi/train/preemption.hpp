#pragma once
// Pre-emption: a cluster scheduler sends SIGTERM before it takes the nodes back, a person at
// the terminal presses Ctrl-C (SIGINT). The handler only sets a flag; the training loop reads
// it at the next step boundary, where all ranks agree (one of them signalled is enough), save
// a checkpoint and stop cleanly.
namespace kintsugi {

// Installs the handlers for SIGTERM and SIGINT (idempotent).
void install_stop_handlers();
// Whether a stop signal arrived in this process.
bool stop_requested();

}  // namespace kintsugi
