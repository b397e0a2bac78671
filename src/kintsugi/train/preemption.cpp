#include "kintsugi/train/preemption.hpp"

#include <csignal>

namespace kintsugi {

namespace {
volatile std::sig_atomic_t g_stop = 0;
// A second signal gets the default action (a second Ctrl-C ends the process at once).
extern "C" void on_stop_signal(int signal) {
  g_stop = 1;
  std::signal(signal, SIG_DFL);
}
}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

bool stop_requested() { return g_stop != 0; }

}  // namespace kintsugi
