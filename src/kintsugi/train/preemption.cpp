#include "kintsugi/train/preemption.hpp"

#include <unistd.h>

#include <csignal>

namespace kintsugi {

namespace {
volatile std::sig_atomic_t g_stop = 0;
volatile std::sig_atomic_t g_interrupts = 0;  // SIGINTs received

extern "C" void on_stop_signal(int signal) {
  g_stop = 1;
  if (signal != SIGINT || ++g_interrupts < 2) return;
  // Only async-signal-safe calls here: write(2) and _exit(2).
  static const char message[] =
      "kintsugi: second interrupt: stopping now without finishing the checkpoint (the last "
      "complete one stays the one to resume; --resume removes the unfinished .partial one)\n";
  const ssize_t ignored = ::write(STDERR_FILENO, message, sizeof(message) - 1);
  (void)ignored;
  ::_exit(128 + SIGINT);
}
}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  // SIGUSR1 and SIGUSR2 are what Open MPI's mpirun passes on to every rank at once and without
  // killing them afterwards (it answers TERM and INT with its own kill sequence), so they are
  // the way to pre-empt a job under mpirun (docs/checkpoints.md). All four are blocked while
  // the handler runs, so the SIGINT count cannot race.
  const int signals[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};
  for (int s : signals) sigaddset(&action.sa_mask, s);
  action.sa_flags = SA_RESTART;
  for (int s : signals) sigaction(s, &action, nullptr);
}

bool stop_requested() { return g_stop != 0; }

}  // namespace kintsugi
